"""A Responses `input_image` by `file_id` through the OpenAI SDK (docs/storage.md: images
uploaded with purpose=vision): a PNG uploaded through the Ingress's /api/v1/storage/files, then
`client.responses.create` with the file id. The Ingress reads the files store: the fake upstream
receives the image inline as a chat `image_url` data URL (detail kept), and the `image` modality
signal routes it. Both front doors: the ext_proc bridge reads the same files store (on Ray the
sidecar reaches the Storage deployment)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.contract.answers import sdk
from tests.contract.conftest import DOORS, FrontDoors, Upstreams
from tests.unit.exchange.test_responses_image_files import png

PNG = png(4, 4)


def vision_document(up: Upstreams) -> dict[str, Any]:
    models = [{"name": name, "backend_refs": [{"base_url": up.chat.host_url}]} for name in ("plain", "eyes")]
    return {
        "version": "v0.3",
        "providers": {"defaults": {"default_model": "plain"}, "models": models},
        "routing": {
            "signals": {"modality": [{"name": "image"}]},
            "decisions": [
                {
                    "name": "vision",
                    "rules": {"type": "modality", "name": "image"},
                    "modelRefs": [{"model": "eyes"}],
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    return front_doors(vision_document(upstreams))


def upload_png(base: str) -> str:
    with httpx.Client(base_url=base, timeout=30) as client:
        answer = client.post(
            "/api/v1/storage/files", files={"file": ("chart.png", PNG)}, data={"purpose": "vision"}
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["purpose"] == "vision" and answer.json()["content_type"] == "image/png"
    return str(answer.json()["id"])


def image_input(file_id: str) -> Any:
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Describe this chart."},
                {"type": "input_image", "file_id": file_id, "detail": "high"},
            ],
        }
    ]


@pytest.mark.parametrize("door", DOORS)
def test_an_uploaded_image_reaches_the_upstream_as_a_data_url(
    door: str, doors: FrontDoors, upstreams: Upstreams
) -> None:
    file_id = upload_png(doors.ingress_url)
    doors.forget()
    upstreams.reset()
    raw = sdk(doors.url(door)).responses.with_raw_response.create(model="MoM", input=image_input(file_id))
    answer = raw.parse()
    doors.settle(door)
    assert answer.status == "completed" and answer.output_text
    assert raw.headers["x-vsr-selected-decision"] == "vision"  # the modality signal saw the image
    [sent] = upstreams.chat.requests
    assert sent.body["model"] == "eyes"
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe this chart."},
                {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
            ],
        }
    ]


@pytest.mark.parametrize("door", DOORS)
def test_an_unknown_file_id_is_404_and_nothing_is_forwarded(
    door: str, doors: FrontDoors, upstreams: Upstreams
) -> None:
    doors.forget()
    upstreams.reset()
    with pytest.raises(openai.NotFoundError) as missing:
        sdk(doors.url(door)).responses.create(model="MoM", input=image_input("file-0badc0de"))
    doors.settle(door)
    assert missing.value.code == "file_not_found"
    assert upstreams.calls() == 0
