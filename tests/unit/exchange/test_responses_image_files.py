"""Responses `input_image` parts by `file_id` (docs/storage.md: images uploaded with
purpose=vision): the translation to a chat `image_url` data URL, the files-store resolver and
its errors, and the Ingress app end to end through the OpenAI SDK (in process, no Ray)."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.api.app import StaticConfigView, create_app
from app.api.parts import IngressParts
from app.common.errors import SvcError
from app.config.loader import parse_config
from app.config.storage import VectorStoreConfig
from app.exchange.client_api import client_api
from app.exchange.responses.images import (
    ImageFile,
    ImageFileRejected,
    ImageStoreDown,
    StoredImages,
    image_file_ids,
    resolve_input_images,
)
from app.exchange.responses.request import ResponsesInputError, ResponsesRequest, responses_to_chat
from app.management.service import Management
from app.pipeline import PipelineServices, RouterPipeline
from app.storage import open_storage
from app.storage.files import FileServiceDown, FileStore
from app.storage.parts import storage_parts
from app.upstream.client import UpstreamClient
from tests.fakes.upstream import FakeUpstream


def png(width: int = 1, height: int = 1) -> bytes:
    """A real (tiny, grey) PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = png(3, 2)
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def request_with(*parts: dict[str, Any], role: str = "user") -> ResponsesRequest:
    return ResponsesRequest.model_validate(
        {"model": "MoM", "input": [{"type": "message", "role": role, "content": list(parts)}]}
    )


IMAGE_PART = {"type": "input_image", "file_id": "file-abc", "detail": "high"}


# -- the translation ----------------------------------------------------------------------
def test_a_resolved_file_id_becomes_a_data_url_image_part_with_its_detail():
    req = request_with({"type": "input_text", "text": "What is this?"}, IMAGE_PART)
    body = responses_to_chat(req, images={"file-abc": ImageFile("image/png", PNG)})
    [message] = body["messages"]
    assert message["role"] == "user"
    assert message["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "high"}},
    ]
    url = message["content"][1]["image_url"]["url"]
    prefix, encoded = url.split(",", 1)
    assert prefix == "data:image/png;base64" and base64.b64decode(encoded) == PNG


def test_the_media_type_is_the_files_and_no_detail_stays_absent():
    req = request_with({"type": "input_image", "file_id": "file-abc"})
    body = responses_to_chat(req, images={"file-abc": ImageFile("image/jpeg", b"\xff\xd8\xff\xe0jpeg")})
    part = body["messages"][0]["content"][0]
    assert part == {
        "type": "image_url",
        "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff\xe0jpeg").decode()},
    }


def test_an_unresolved_file_id_keeps_the_400_message():
    with pytest.raises(
        ResponsesInputError, match=r"input_image needs image_url \(file_id needs the files store\)"
    ):
        responses_to_chat(request_with(IMAGE_PART))


def test_an_image_url_wins_over_a_file_id_and_is_not_read():
    part = {"type": "input_image", "image_url": "https://x/cat.png", "file_id": "file-abc"}
    assert image_file_ids(request_with(part).input) == {}
    body = responses_to_chat(request_with(part))
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}
    ]


def test_file_ids_are_collected_once_with_where_they_are_first_named():
    req = ResponsesRequest.model_validate(
        {
            "model": "MoM",
            "input": [
                {"role": "user", "content": "plain"},
                {"role": "user", "content": [{"type": "input_text", "text": "a"}, IMAGE_PART]},
                {"role": "user", "content": [{"type": "input_image", "file_id": "file-def"}, IMAGE_PART]},
                # A tool result's images are dropped (chat tool results are text): not read.
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [{"type": "input_image", "file_id": "file-x"}],
                },
            ],
        }
    )
    assert image_file_ids(req.input) == {
        "file-abc": "input[1].content[1].file_id",
        "file-def": "input[2].content[0].file_id",
    }


# -- the resolver over a files store ------------------------------------------------------
@pytest.fixture
def files(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "files", max_file_bytes=4096, max_files=10)


async def test_stored_images_reads_a_vision_file_as_uploaded(files: FileStore):
    record = files.create("cat.png", PNG, "vision")
    image = await StoredImages(files)(record.id)
    assert image == ImageFile("image/png", PNG)
    assert await StoredImages(files)("file-0000") is None  # unknown
    assert await StoredImages(files)("../etc/passwd") is None  # not an id at all


async def test_stored_images_refuses_a_document_and_an_image_over_the_limit(files: FileStore):
    doc = files.create("notes.txt", b"just text", "assistants")
    with pytest.raises(ImageFileRejected, match="purpose 'assistants'"):
        await StoredImages(files)(doc.id)
    image = files.create("cat.png", PNG, "vision")
    assert StoredImages(files).max_bytes == 4096  # the store's own upload limit by default
    with pytest.raises(ImageFileRejected, match=f"{len(PNG)} bytes, over the limit of 10"):
        await StoredImages(files, max_bytes=10)(image.id)


class DownStore:
    max_file_bytes = 4096

    def get(self, file_id: str) -> Any:
        raise FileServiceDown("file storage unavailable: disk gone")

    def content(self, file_id: str) -> Any:
        raise AssertionError("not reached")


async def test_a_store_that_is_down_is_image_store_down():
    with pytest.raises(ImageStoreDown, match="disk gone"):
        await StoredImages(DownStore())("file-abc")


class AsyncClient:
    """A storage client with FileStore's methods as coroutines (a Storage deployment's)."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.calls: list[str] = []

    async def get(self, file_id: str) -> Any:
        self.calls.append("get")
        return self.store.get(file_id)

    async def content(self, file_id: str) -> bytes | None:
        self.calls.append("content")
        return self.store.content(file_id)


async def test_stored_images_takes_an_async_client(files: FileStore):
    record = files.create("cat.png", PNG, "vision")
    client = AsyncClient(files)
    assert await StoredImages(client, max_bytes=4096)(record.id) == ImageFile("image/png", PNG)
    assert client.calls == ["get", "content"]


# -- the errors a client gets -------------------------------------------------------------
async def test_resolve_input_images_answers_each_failure_with_its_body(files: FileStore):
    resolve = StoredImages(files)
    good = files.create("cat.png", PNG, "vision").id
    doc = files.create("notes.md", b"# notes", "assistants").id
    images = await resolve_input_images(request_with({"type": "input_image", "file_id": good}).input, resolve)
    assert images == {good: ImageFile("image/png", PNG)}

    with pytest.raises(SvcError) as unknown:
        await resolve_input_images(
            request_with({"type": "input_image", "file_id": "file-nope"}).input, resolve
        )
    assert unknown.value.status == 404
    body = unknown.value.body()["error"]
    assert (body["type"], body["code"], body["param"]) == (
        "invalid_request_error",
        "file_not_found",
        "input[0].content[0].file_id",
    )
    assert "file-nope" in body["message"]

    with pytest.raises(SvcError) as wrong:
        await resolve_input_images(request_with({"type": "input_image", "file_id": doc}).input, resolve)
    assert (wrong.value.status, wrong.value.code) == (400, "invalid_image_file")
    assert "purpose=vision" in wrong.value.message

    with pytest.raises(SvcError) as down:
        await resolve_input_images(request_with(IMAGE_PART).input, StoredImages(DownStore()))
    assert (down.value.status, down.value.type, down.value.code) == (
        503,
        "service_unavailable_error",
        "file_store_unavailable",
    )
    assert down.value.headers == {"Retry-After": "1"}


async def test_a_front_door_without_a_files_store_answers_the_old_400():
    raw = request_with(IMAGE_PART).model_dump(mode="json")  # the decoded body, as the exchange hands it
    api = client_api("/v1/responses")  # the ext_proc bridge's, without a files store
    assert api is not None
    await api.prepare(raw)
    with pytest.raises(SvcError) as refused:
        api.parse(raw)
    assert refused.value.status == 400 and "file_id needs the files store" in refused.value.message


async def test_a_front_door_with_a_files_store_inlines_the_image(files: FileStore):
    file_id = files.create("cat.png", PNG, "vision").id
    raw = request_with({"type": "input_image", "file_id": file_id, "detail": "low"}).model_dump(mode="json")
    api = client_api("/v1/responses", StoredImages(files))
    assert api is not None
    await api.prepare(raw)
    part = api.parse(raw)["messages"][0]["content"][0]
    assert part == {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}}


# -- the Ingress app through the OpenAI SDK ---------------------------------------------------
@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(name="gpt") as fake:
        yield fake


def ingress(upstream: FakeUpstream, storage_dir: Path | None) -> FastAPI:
    """The Ingress app over a files store under `storage_dir` (None: no files store); a
    `vision` decision on the `image` modality signal picks the `eyes` model."""
    models = [{"name": n, "backend_refs": [{"base_url": upstream.base_url}]} for n in ("gpt", "eyes")]
    document = {
        "version": "v0.3",
        "providers": {"defaults": {"default_model": "gpt"}, "models": models},
        "routing": {
            "signals": {"modality": [{"name": "image"}]},
            "decisions": [
                {
                    "name": "vision",
                    "priority": 10,
                    "rules": {"operator": "AND", "conditions": [{"type": "modality", "name": "image"}]},
                    "modelRefs": [{"model": "eyes"}],
                }
            ],
        },
    }
    config = parse_config(document).config
    view = StaticConfigView(config)
    storage = open_storage(VectorStoreConfig(), storage_dir) if storage_dir is not None else None
    management = Management(config, config_view=view)
    parts = IngressParts(storage=storage_parts(storage))
    return create_app(
        RouterPipeline(config, PipelineServices()), UpstreamClient(), view, management=management, parts=parts
    )


def http(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc")


def sdk(app: FastAPI) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://svc/v1", http_client=http(app), max_retries=0
    )


async def upload(app: FastAPI, name: str, data: bytes, purpose: str) -> str:
    async with http(app) as client:
        answer = await client.post(
            "/api/v1/storage/files", files={"file": (name, data)}, data={"purpose": purpose}
        )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def image_input(file_id: str, text: str = "What is in this picture?") -> Any:
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": text},
                {"type": "input_image", "file_id": file_id, "detail": "low"},
            ],
        }
    ]


async def test_an_uploaded_image_reaches_the_upstream_inline_and_routes_as_an_image(
    upstream: FakeUpstream, tmp_path: Path
):
    app = ingress(upstream, tmp_path)
    file_id = await upload(app, "cat.png", PNG, "vision")
    raw = await sdk(app).responses.with_raw_response.create(model="MoM", input=image_input(file_id))
    answer = raw.parse()
    assert answer.status == "completed" and answer.output_text
    assert raw.headers["x-vsr-selected-decision"] == "vision"  # the modality signal saw the image
    sent = upstream.requests[-1].body
    assert sent["model"] == "eyes"
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
            ],
        }
    ]
    # The stored conversation holds the image as sent: a continuation sends it again.
    await sdk(app).responses.create(model="MoM", input="And its colour?", previous_response_id=answer.id)
    history = upstream.requests[-1].body["messages"]
    assert history[0]["content"][1] == {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}}
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    # input_items lists the part as the client sent it (the file id, not the bytes).
    items = await sdk(app).responses.input_items.list(answer.id)
    assert items.data[0].model_dump()["content"][1]["file_id"] == file_id


@pytest.mark.slow
async def test_an_unknown_file_is_404_a_document_400_and_a_missing_store_503(
    upstream: FakeUpstream, tmp_path: Path
):
    app = ingress(upstream, tmp_path)
    calls = upstream.request_count
    with pytest.raises(openai.NotFoundError) as unknown:
        await sdk(app).responses.create(model="MoM", input=image_input("file-0123abcd"))
    assert unknown.value.code == "file_not_found" and unknown.value.param == "input[0].content[1].file_id"

    doc = await upload(app, "notes.txt", b"plain words", "assistants")
    with pytest.raises(openai.BadRequestError) as wrong:
        await sdk(app).responses.create(model="MoM", input=image_input(doc))
    assert wrong.value.code == "invalid_image_file"

    with pytest.raises(openai.APIStatusError) as down:
        await sdk(ingress(upstream, None)).responses.create(model="MoM", input=image_input("file-0123abcd"))
    assert down.value.status_code == 503
    assert down.value.response.json()["error"]["code"] == "file_store_unavailable"
    assert down.value.response.headers["retry-after"] == "1"
    assert upstream.request_count == calls  # nothing was forwarded
