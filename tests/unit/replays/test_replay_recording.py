"""The `router_replay` plugin in the pipeline: route() tags the request, complete() records it."""

from __future__ import annotations

from typing import Any

from app.config.document import RouterConfig
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.completion import CompletionServices, complete_request
from app.pipeline.plan import CompletionReport
from app.pipeline.replay import REPLAY_ID_HEADER, clip_body
from app.pipeline.signals.pii import pii_factory
from app.replays.replays import ReplayStore, redact_record
from app.runtime.schemas import Span
from app.runtime.signal_engine import SignalItem, SignalRequest


def config(plugin: dict[str, Any] | None) -> RouterConfig:
    decision: dict[str, Any] = {
        "name": "urgent",
        "priority": 10,
        "modelRefs": [{"model": "small"}],
        "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "urgent"}]},
    }
    if plugin is not None:
        decision["plugins"] = [plugin]
    return RouterConfig.model_validate(
        {
            "providers": {
                "defaults": {"default_model": "small"},
                "models": [
                    {
                        "name": "small",
                        "backend_refs": [{"endpoint": "127.0.0.1:8000"}],
                        "pricing": {"currency": "USD", "prompt_per_1m": 1.0, "completion_per_1m": 2.0},
                    }
                ],
            },
            "routing": {
                "signals": {"keywords": [{"name": "urgent", "keywords": ["urgent"]}]},
                "decisions": [decision],
            },
        }
    )


def body(text: str) -> dict[str, Any]:
    return {"model": "MoM", "messages": [{"role": "user", "content": text}]}


ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "model": "small",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}


async def test_decision_with_router_replay_is_recorded_once_completed() -> None:
    store = ReplayStore()
    pipeline = RouterPipeline(
        config({"type": "router_replay", "configuration": {}}), PipelineServices(record_replay=store.record)
    )
    plan = await pipeline.route(body("urgent: fix it"), {"authorization": "Bearer secret-token"}, "req-1")
    replay_id = plan.response_headers[REPLAY_ID_HEADER]
    assert plan.replay is not None and plan.replay.replay_id == replay_id
    assert len(store) == 0  # nothing before complete()
    await pipeline.complete(plan, CompletionReport(status=200, model="small", response=ANSWER, total_s=0.25))
    record = store.get(replay_id)
    assert record is not None
    assert record["decision"] == "urgent" and record["selected_model"] == "small" and record["status"] == 200
    assert record["request_id"] == "req-1" and record["response_path"] == "upstream"
    assert record["usage"]["total_tokens"] == 15 and record["cost"]["currency"] == "USD"
    assert record["cost"]["amount"] > 0 and record["latency_ms"] == 250.0
    assert "keyword:urgent" in record["matched_signals"]
    assert "request" not in record and "response" not in record  # bodies only when asked
    assert "secret-token" not in str(record)  # headers are never recorded
    aggregate = store.aggregate()
    assert aggregate.total == 1 and aggregate.by_model["small"].prompt_tokens == 10


async def test_bodies_are_captured_only_when_configured_and_hidden_without_data_read() -> None:
    store = ReplayStore()
    plugin = {
        "type": "router_replay",
        "configuration": {"capture_request_body": True, "capture_response_body": True},
    }
    pipeline = RouterPipeline(config(plugin), PipelineServices(record_replay=store.record))
    plan = await pipeline.route(body("urgent: my question"), {}, "req-2")
    await pipeline.complete(plan, CompletionReport(status=200, model="small", response=ANSWER))
    record = store.get(plan.response_headers[REPLAY_ID_HEADER])
    assert record is not None
    assert record["request"]["messages"][-1]["content"] == "urgent: my question"
    assert record["response"]["choices"][0]["message"]["content"] == "done"
    hidden = redact_record(record, data=False, secrets=False)
    assert hidden["request"] == hidden["response"] == "***REDACTED***"


async def test_no_plugin_or_no_recorder_means_no_replay() -> None:
    store = ReplayStore()
    plain = RouterPipeline(config(None), PipelineServices(record_replay=store.record))
    plan = await plain.route(body("urgent"), {}, "a")
    assert plan.replay is None and REPLAY_ID_HEADER not in plan.response_headers
    await plain.complete(plan, CompletionReport(status=200, response=ANSWER))
    unrecorded = RouterPipeline(config({"type": "router_replay", "configuration": {}}), PipelineServices())
    assert (await unrecorded.route(body("urgent"), {}, "b")).replay is None
    disabled = RouterPipeline(
        config({"type": "router_replay", "configuration": {"enabled": False}}),
        PipelineServices(record_replay=store.record),
    )
    assert (await disabled.route(body("urgent"), {}, "c")).replay is None
    assert len(store) == 0


async def test_routing_in_one_process_and_recording_in_another() -> None:
    # The Ray graph: a Router replica marks the request, the front door completes and records.
    router = RouterPipeline(
        config({"type": "router_replay", "configuration": {}}), PipelineServices(capture_replays=True)
    )
    plan = await router.route(body("urgent: fix it"), {}, "req-3")
    assert plan.replay is not None and plan.response_headers[REPLAY_ID_HEADER] == plan.replay.replay_id
    store = ReplayStore()
    await complete_request(
        CompletionServices(record_replay=store.record),
        plan,
        CompletionReport(status=200, model="small", response=ANSWER),
    )
    record = store.get(plan.replay.replay_id)
    assert record is not None and record["decision"] == "urgent" and record["usage"]["total_tokens"] == 15


async def test_a_failing_recorder_never_breaks_complete() -> None:
    def broken(record: dict[str, Any]) -> None:
        raise RuntimeError("store down")

    pipeline = RouterPipeline(
        config({"type": "router_replay", "configuration": {}}), PipelineServices(record_replay=broken)
    )
    plan = await pipeline.route(body("urgent"), {}, "d")
    accounting = await pipeline.complete(plan, CompletionReport(status=200, model="small", response=ANSWER))
    assert accounting.usage["total_tokens"] == 15


def test_large_bodies_are_cut() -> None:
    assert clip_body({"a": 1}, None) == {"a": 1}
    cut = clip_body({"text": "x" * 1000}, 100)
    assert cut["truncated"] is True and cut["bytes"] > 1000 and len(cut["preview"]) == 100


async def test_a_refusal_names_its_check_and_score_in_the_replay_record() -> None:
    """What an operator marks wrong: the record of a 403 says which check fired, its score and
    threshold (docs/security.md "Auditable refusals")."""

    class SsnOnly:
        """A PII engine that finds one SSN (0.85) by substring."""

        name = "ssn-only"
        reads_vectors = False

        async def classify(self, request: SignalRequest) -> list[SignalItem]:
            span = Span(label="US_SSN", start=0, end=11, text="x", probability=0.85)
            return [SignalItem(spans=[span] if "123-45-6789" in t else []) for t in request.texts]

        def failed(self, reason: str) -> Exception:
            return RuntimeError(reason)

    store = ReplayStore()
    replay = {"type": "router_replay", "configuration": {}}
    document = config(replay).model_dump(mode="json", by_alias=True, exclude_none=True)
    document["routing"]["decisions"][0]["plugins"].append(
        {"type": "pii", "configuration": {"enabled": True, "pii_types_allowed": [], "threshold": 0.7}}
    )
    services = PipelineServices(record_replay=store.record, evaluators={"pii": pii_factory(SsnOnly())})
    pipeline = RouterPipeline(RouterConfig.model_validate(document), services)
    plan = await pipeline.route(body("urgent: my ssn is 123-45-6789"), {}, "req-9")
    assert plan.immediate is not None, (plan.decision, plan.signals)
    assert plan.immediate.status == 403
    await pipeline.complete(plan, CompletionReport(status=403, total_s=0.01))
    record = store.get(plan.response_headers[REPLAY_ID_HEADER])
    assert record is not None and record["status"] == 403 and record["response_path"] == "blocked"
    assert record["refusal"] == {
        "check": "pii:plugin:urgent",
        "code": "pii_detected",
        "score": 0.85,
        "threshold": 0.7,
        "entities": ["US_SSN"],
    }
    details = plan.immediate.body["error"]["details"]
    assert (details["check"], details["score"], details["threshold"]) == ("pii:plugin:urgent", 0.85, 0.7)
