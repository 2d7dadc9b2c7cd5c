"""The `pii` plugin's actions in the pipeline (no Ray): `mask` sends placeholders upstream and
keeps no original in what the router stores; `route` sends the request to a private model;
`block` stays the default. The detector is a fake with real spans (e-mail addresses)."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from app.config.document import RouterConfig
from app.config.validate import semantic_issues
from app.keys.grant import ModelGrant
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.plan import CompletionReport
from app.pipeline.signals.pii import pii_factory
from app.runtime.schemas import Span
from app.runtime.signal_engine import SignalItem, SignalRequest
from tests.unit.pipeline.test_classifier_signals import FakeEmbed, FakeEngine

EMAIL = re.compile(r"[\w.]+@[\w.]+\w")


class EmailPII(FakeEngine):
    reads_vectors = False

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        self.texts += request.texts
        return [
            SignalItem(spans=[Span(label="EMAIL_ADDRESS", start=m.start(), end=m.end(), text=m.group(0), probability=0.95)
                              for m in EMAIL.finditer(text)])
            for text in request.texts
        ]  # fmt: skip


def document(action: str, private: bool = True) -> dict[str, Any]:
    return {
        "providers": {
            "defaults": {"default_model": "cloud"},
            "models": [
                {"name": "cloud", "backend_refs": [{"endpoint": "127.0.0.1:8000"}]},
                {"name": "onprem", "private": private, "backend_refs": [{"endpoint": "127.0.0.1:8001"}]},
            ],
        },
        "routing": {
            "signals": {"keywords": [{"name": "mail", "keywords": ["mail"]}]},
            "decisions": [
                {
                    "name": "mail",
                    "rules": {"type": "keyword", "name": "mail"},
                    "modelRefs": [{"model": "cloud"}],
                    "plugins": [
                        {"type": "pii", "configuration": {"pii_types_allowed": [], "action": action}},
                        {"type": "semantic-cache", "configuration": {"enabled": True}},
                        {"type": "router_replay", "configuration": {"capture_request_body": True, "capture_response_body": True}},
                    ],
                }
            ],
        },
    }  # fmt: skip


class Stores:
    def __init__(self) -> None:
        self.cache: list[Any] = []
        self.replays: list[dict[str, Any]] = []

    async def lookup(self, *args: Any, **kwargs: Any) -> Any:
        self.cache.append(("lookup", args, kwargs))
        return None

    async def store(self, *args: Any, **kwargs: Any) -> None:
        self.cache.append(("store", args, kwargs))


def pipeline(action: str, stores: Stores, private: bool = True) -> RouterPipeline:
    services = PipelineServices(
        embed=FakeEmbed(),
        evaluators={"pii": pii_factory(EmailPII())},
        cache_lookup=stores.lookup,
        cache_store=stores.store,
        record_replay=stores.replays.append,
    )
    return RouterPipeline(
        RouterConfig.model_validate(document(action, private)), services, rng=random.Random(0)
    )


def chat(*texts: str) -> dict[str, Any]:
    roles = ["user", "assistant"]
    return {"model": "MoM", "messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]}


async def test_mask_sends_placeholders_and_keeps_no_original(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    stores = Stores()
    pipe = pipeline("mask", stores)
    body = chat(
        "mail ana@example.org please",
        "Done, I wrote to ana@example.org.",
        "mail bo@example.net and ana@example.org",
    )
    plan = await pipe.route(body)
    assert plan.immediate is None and plan.selected_model == "cloud"
    assert plan.pii_action == "mask" and plan.response_headers["x-vsr-pii-action"] == "mask"
    sent = json.dumps(plan.body)
    assert "ana@example.org" not in sent and "bo@example.net" not in sent
    assert [m["content"] for m in plan.body["messages"]] == [
        "mail <EMAIL_ADDRESS_1> please",
        "Done, I wrote to <EMAIL_ADDRESS_1>.",
        "mail <EMAIL_ADDRESS_2> and <EMAIL_ADDRESS_1>",
    ]
    assert body["messages"][0]["content"] == "mail ana@example.org please"  # the client's body is kept
    assert plan.cache_write is None and stores.cache == []  # no lookup keyed by, no entry holding, PII
    answer = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sent to <EMAIL_ADDRESS_2>."}}]
    }
    await pipe.complete(plan, CompletionReport(status=200, model="cloud", response=answer))
    assert len(stores.replays) == 1 and stores.replays[0]["pii_action"] == "mask"
    kept = json.dumps(stores.replays) + plan.model_dump_json() + repr(plan) + caplog.text
    assert "ana@example.org" not in kept and "bo@example.net" not in kept
    assert "<EMAIL_ADDRESS_2>" in json.dumps(stores.replays[0]["response"])


async def test_route_selects_the_private_model() -> None:
    stores = Stores()
    plan = await pipeline("route", stores).route(chat("mail ana@example.org please"))
    assert plan.cache_write is None and stores.cache == []  # a shared cache is no private model
    assert plan.immediate is None and plan.pii_action == "route"
    assert plan.selected_model == "onprem" and [t.model for t in plan.candidates] == ["onprem"]
    assert plan.reason_code == "pii_policy_alternative_selected"
    assert plan.body["messages"][0]["content"] == "mail ana@example.org please"  # a private model may read it


async def test_route_never_leaves_the_keys_grants() -> None:
    """A key granted only the cloud model: no private model it may use, so refused as `block`."""
    grant = ModelGrant(key_id="k1", models=["cloud"])
    plan = await pipeline("route", Stores()).route(chat("mail ana@example.org please"), grant=grant)
    assert plan.immediate is not None and plan.immediate.status == 403
    assert plan.selected_model != "onprem" and all(t.model != "onprem" for t in plan.candidates)


@pytest.mark.parametrize("action", ["block", "mask", "route"])
async def test_a_request_without_pii_goes_as_it_came(action: str) -> None:
    stores = Stores()
    plan = await pipeline(action, stores).route(chat("mail the summary to the team"))
    assert plan.immediate is None and plan.pii_action is None and plan.selected_model == "cloud"
    assert plan.pii_mask is None
    assert [call[0] for call in stores.cache] == ["lookup"] and plan.cache_write is not None  # cached as ever


async def test_block_stays_the_default() -> None:
    plan = await pipeline("block", Stores()).route(chat("mail ana@example.org please"))
    assert plan.immediate is not None and plan.immediate.status == 403 and plan.pii_action is None


def test_route_without_a_private_model_is_rejected_by_validation() -> None:
    errors, _ = semantic_issues(RouterConfig.model_validate(document("route", private=False)))
    assert [(e.path, e.code) for e in errors] == [
        ("routing.decisions[0].plugins[0].configuration.action", "no_private_model")
    ]
    assert semantic_issues(RouterConfig.model_validate(document("route")))[0] == []


async def test_a_session_never_overrides_the_private_route() -> None:
    from app.state.session_store import SessionState

    doc = {**document("route"), "global": {"router": {"session_affinity": {"enabled": True}}}}
    pipe = RouterPipeline(
        RouterConfig.model_validate(doc),
        PipelineServices(embed=FakeEmbed(), evaluators={"pii": pii_factory(EmailPII())}),
    )
    assert pipe.services.sessions is not None
    await pipe.services.sessions.put("s1", SessionState(model="cloud", turns=2), 60)
    plan = await pipe.route(chat("mail ana@example.org please"), {"x-session-id": "s1"})
    assert plan.pii_action == "route" and plan.selected_model == "onprem" and plan.session is None
    kept = await pipe.route(chat("mail the summary"), {"x-session-id": "s1"})  # no PII: the session holds
    assert kept.selected_model == "cloud" and kept.session is not None and kept.session.action == "kept"
