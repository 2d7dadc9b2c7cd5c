"""The `rag` plugin over a KNOWLEDGE BASE end to end, through the OpenAI SDK on both front doors.

A knowledge base of labelled entries is created through the Ingress's management route (202
pending, then active once the pipeline's encoder has embedded it: the vectors the kb signal
scores). A MoM question whose decision's rag plugin names the base reaches the fake upstream
with the nearest entry's text in its prompt, and the answer names the entry
(routing_metadata.rag.chunks: knowledge_base, entry_id, index, label; x-vsr-rag-chunks). The
preview probe of that binding searches the base too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.pipeline.rag import PREAMBLE
from tests.contract.answers import Answer, sdk, user
from tests.contract.conftest import DOORS, FrontDoors, Upstreams, wait_until

KB = "site_facts"
ENTRIES = [
    {
        "id": "reactor-temp",
        "text": "The Zorblax reactor in building nine runs at 412 kelvin during the night shift.",
        "label": "operations",
    },
    {
        "id": "soup",
        "text": "The staff cafeteria serves lentil soup on Tuesdays; payment is by badge only.",
        "label": "cafeteria",
    },
    {
        "text": "Visitors park in the east lot and sign in at the front desk of building two.",
        "label": "visitors",
    },
]


def rag_kb_document(up: Upstreams) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "general"},
            "models": [{"name": "general", "backend_refs": [{"base_url": up.chat.host_url}]}],
        },
        "routing": {
            "decisions": [
                {
                    "name": "site_qa",
                    "modelRefs": [{"model": "general"}],
                    "plugins": [
                        {
                            "type": "rag",
                            "configuration": {"knowledge_base": KB, "top_k": 1, "max_context_tokens": 256},
                        }
                    ],
                }
            ]
        },
    }


@pytest.fixture(scope="module")
def doors(front_doors: Callable[[dict[str, Any]], FrontDoors], upstreams: Upstreams) -> FrontDoors:
    found = front_doors(rag_kb_document(upstreams))
    base = f"{found.ingress_url}/api/v1/storage/knowledge-bases"
    with httpx.Client(timeout=30) as client:
        created = client.post(base, json={"name": KB, "entries": ENTRIES})
        if created.status_code != 409:  # the module's fixture ran before in this session
            assert created.status_code == 202, created.text

        def active() -> bool:
            return bool(client.get(f"{base}/{KB}").json()["activation_status"] == "active")

        wait_until(active, "the knowledge base to turn active")
    return found


def ask(url: str, text: str) -> Answer:
    raw = sdk(url).chat.completions.with_raw_response.create(model="MoM", messages=user(text))
    raw.parse()
    return Answer.of(raw.http_response)


def injected(upstreams: Upstreams) -> str | None:
    messages = upstreams.chat.requests[-1].body["messages"]
    found = [m["content"] for m in messages if m["role"] == "system" and PREAMBLE in str(m["content"])]
    return found[0] if found else None


def test_the_nearest_entry_reaches_the_upstream_and_the_answer_names_it(
    doors: FrontDoors, upstreams: Upstreams
) -> None:
    for door in DOORS:
        doors.forget()
        upstreams.reset()
        answer = ask(doors.url(door), "At what temperature does the Zorblax reactor run at night?")
        doors.settle(door)
        assert answer.status == 200, (door, answer.body)
        prompt = injected(upstreams)
        assert prompt is not None and ENTRIES[0]["text"] in prompt, (door, prompt)
        assert "lentil soup" not in prompt and "east lot" not in prompt, (door, prompt)
        assert answer.headers["x-vsr-rag-chunks"] == "1" and answer.headers["x-vsr-rag-status"] == "ok", door
        rag = answer.body["routing_metadata"]["rag"]
        assert rag["knowledge_bases"] == [KB] and rag["vector_store_ids"] == [], (door, rag)
        [chunk] = rag["chunks"]
        assert chunk["source"] == "knowledge_base" and chunk["knowledge_base"] == KB, (door, chunk)
        assert (chunk["entry_id"], chunk["index"], chunk["label"]) == ("reactor-temp", 0, "operations")
        assert 0.3 < chunk["score"] <= 1.0, chunk  # a cosine of the router's encoder

        again = ask(doors.url(door), "Where do visitors park?")
        doors.settle(door)
        assert again.status == 200, (door, again.body)
        prompt = injected(upstreams)
        assert prompt is not None and ENTRIES[2]["text"] in prompt, (door, prompt)
        [chunk] = again.body["routing_metadata"]["rag"]["chunks"]
        assert (chunk["entry_id"], chunk["label"]) == ("2", "visitors"), (door, chunk)  # no id: its index


def test_the_preview_probe_searches_the_knowledge_base(doors: FrontDoors) -> None:
    request = {
        "binding": {"decision": "site_qa"},
        "mode": "probe",
        "request": {"messages": user("Which soup does the cafeteria serve on Tuesdays?")},
    }
    doors.forget()
    probe = httpx.post(f"{doors.ingress_url}/api/v1/plugins/rag/preview", json=request, timeout=60)
    assert probe.status_code == 200, probe.text
    answer = probe.json()
    assert answer["backend_calls"] == 1 and answer["result"]["retrieval"] == "knowledge_base"
    [chunk] = answer["result"]["chunks"]
    assert (chunk["knowledge_base"], chunk["entry_id"], chunk["label"]) == (KB, "soup", "cafeteria")
    assert "lentil soup" in answer["result"]["injected_context"]
    assert len(doors.services.rag_cache) == 0  # the probe neither read nor filled the pipeline's cache
