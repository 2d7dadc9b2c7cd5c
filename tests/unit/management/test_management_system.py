"""System routes (ready, startup status, status conditions, discovery, OpenAPI, docs),
inventory and older paths, routing preview, replays and outcomes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.common.redaction import REDACTED
from app.management import StartupTracker
from app.replays.replays import ReplayStore
from tests.unit.management.test_management_support import SECRET, Harness, base_document, error_code


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


# ------------------------------------------------------------------ startup, ready, status
async def test_ready_is_503_until_every_model_is_ready_then_stays_200():
    tracker = StartupTracker()
    tracker.register("DomainClassifier", artifact="domain-classifier", process="ray-actor")
    tracker.register("Guard", artifact="jailbreak-guard")
    tracker.seal()
    h = Harness(startup=tracker)
    async with h.client() as c:
        waiting = await c.get("/ready")
        status = (await c.get("/api/v1/status")).json()
        tracker.mark_ready("DomainClassifier")
        still = await c.get("/ready")
        tracker.mark_ready("Guard")
        ready = await c.get("/ready")
        tracker.register("NewModel")  # a reload's model, not ready yet
        after_reload = await c.get("/ready")
        startup = (await c.get("/startup-status")).json()
        status_after = (await c.get("/api/v1/status")).json()
    assert waiting.status_code == 503 and waiting.json()["phase"] == "loading_model_deployments"
    assert waiting.json()["pending_models"] == ["DomainClassifier", "Guard"]
    assert conditions(status)["StartupComplete"] == ("False", "StartupIncomplete")
    assert conditions(status)["Ready"] == ("False", "StartupIncomplete")
    assert still.status_code == 503 and still.json()["ready_models"] == 1
    assert ready.status_code == 200 and ready.json()["phase"] == "complete"
    assert after_reload.status_code == 200
    names = [m["name"] for m in startup["model_deployments"]]
    assert names == ["DomainClassifier", "Guard", "NewModel"]
    assert startup["model_deployments"][0]["artifact"] == "domain-classifier"
    assert conditions(status_after)["StartupComplete"] == ("True", "StartupComplete")
    assert conditions(status_after)["Ready"] == ("Unknown", "RequiredDependenciesUnobserved")


async def test_startup_failure_is_phase_error_with_reason_but_status_hides_details():
    tracker = StartupTracker()
    tracker.register("Guard")
    tracker.seal()
    tracker.mark_failed("Guard", "weights missing at /secret/path")
    h = Harness(startup=tracker)
    async with h.client() as c:
        ready = await c.get("/ready")
        startup = (await c.get("/startup-status")).json()
        status = await c.get("/api/v1/status")
    assert ready.status_code == 503 and ready.json()["phase"] == "error"
    assert startup["model_deployments"][0]["reason"] == "weights missing at /secret/path"
    assert conditions(status.json())["StartupComplete"] == ("True", "StartupFailed")
    assert "/secret/path" not in status.text


@pytest.mark.slow
async def test_status_document_shape():
    h = Harness()
    async with h.client() as c:
        first = (await c.get("/api/v1/status")).json()
        second = (await c.get("/api/v1/status")).json()
    assert first["schema_version"] == "v1" and first["instance_id"] == second["instance_id"]
    assert conditions(first) == {
        "Live": ("True", "ProcessRunning"),
        "StartupComplete": ("True", "StartupComplete"),
        "ActiveConfigAvailable": ("True", "ActiveConfigAvailable"),
        "ConfigConverged": ("True", "ConfigHashesMatch"),
        "Ready": ("Unknown", "RequiredDependenciesUnobserved"),
        "ManagementStoreAvailable": ("True", "StoreReachable"),
        "BackendsReachable": ("False", "BackendsUnreachable"),  # nothing listens on port 9
    }
    assert Harness().management.instance_id != h.management.instance_id


async def test_status_names_the_backends_nothing_listens_for():
    """The router runs without its upstreams; /api/v1/status says which are down, live."""
    listening = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    document = base_document(f"http://127.0.0.1:{port}/v1")
    document["providers"]["models"][1]["backend_refs"][0]["base_url"] = "http://127.0.0.1:9/v1"
    h = Harness(document)
    async with listening, h.client() as c:
        one_down = (await c.get("/api/v1/status")).json()
        listening.close()
        await listening.wait_closed()
        both_down = (await c.get("/api/v1/status")).json()
    backends = next(x for x in one_down["conditions"] if x["type"] == "BackendsReachable")
    assert (backends["status"], backends["reason"]) == ("False", "BackendsUnreachable")
    assert backends["message"] == "unreachable: big (127.0.0.1:9)"
    assert SECRET not in str(one_down)  # a backend's name and address, never its credentials
    message = next(x for x in both_down["conditions"] if x["type"] == "BackendsReachable")["message"]
    assert message == f"unreachable: small (127.0.0.1:{port}), big (127.0.0.1:9)"


# ------------------------------------------------------------------ discovery, openapi, docs
async def test_discovery_lists_every_route_with_permission_and_sensitivity():
    h = Harness()
    async with h.client() as c:
        body = (await c.get("/api/v1")).json()
    keys = {(r["method"], r["path"]) for r in body["routes"]}
    for key in [
        ("GET", "/health"),
        ("GET", "/ready"),
        ("GET", "/api/v1/config"),
        ("PUT", "/api/v1/config"),
        ("POST", "/api/v1/config/rollback"),
        ("GET", "/api/v1/observability/replays/{replay_id}"),
        ("POST", "/api/v1/routing/preview"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
    ]:
        assert key in keys
    config_get = next(r for r in body["routes"] if (r["method"], r["path"]) == ("GET", "/api/v1/config"))
    assert config_get["sensitivity"] == "secret" and "secret_view" in body["permissions"]
    assert ("GET", "/config/router") not in keys


@pytest.mark.slow
async def test_openapi_is_3_0_and_narrows_to_one_operation():
    h = Harness()
    async with h.client() as c:
        full = (await c.get("/openapi.json")).json()
        one = await c.get("/openapi.json", params={"path": "/api/v1/config", "method": "PATCH"})
        path_only = (await c.get("/openapi.json", params={"path": "/api/v1/config"})).json()
        unknown = await c.get("/openapi.json", params={"path": "/nope"})
        wrong_method = await c.get(
            "/openapi.json", params={"path": "/api/v1/config/hash", "method": "delete"}
        )
        docs = await c.get("/docs")
    assert full["openapi"].startswith("3.0")
    assert "/api/v1/config/versions" in full["paths"] and "/v1/chat/completions" in full["paths"]
    assert list(one.json()["paths"]) == ["/api/v1/config"] and list(
        one.json()["paths"]["/api/v1/config"]
    ) == ["patch"]
    assert set(path_only["paths"]["/api/v1/config"]) == {"get", "patch", "put"}
    assert unknown.status_code == 404 and wrong_method.status_code == 404
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    text = str(full)
    assert "'type': 'null'" not in text and "'const':" not in text  # 3.1-only forms rewritten


# ------------------------------------------------------------------ inventory, older paths
@pytest.mark.slow
async def test_inventory_and_older_views():
    tracker = StartupTracker()
    tracker.register("Embedding", artifact="minilm-embedding")
    tracker.seal()
    tracker.mark_ready("Embedding")
    h = Harness(startup=tracker)
    async with h.client() as c:
        models = (await c.get("/api/v1/inventory/models")).json()["models"]
        embeddings = (await c.get("/api/v1/inventory/embedding-models")).json()["models"]
        runtime = (await c.get("/api/v1/inventory/model-runtime")).json()["deployments"]
        classifier = await c.get("/api/v1/inventory/classifier")
        info_models = (await c.get("/info/models")).json()
        info_classifier = (await c.get("/info/classifier")).json()
        metrics = await c.get("/metrics/classification")
        combined = await c.post("/api/v1/classify/combined", json={"text": "x"})
        router_config = await c.get("/config/router")
    names = {m["name"] for m in models}
    assert {"minilm-embedding", "domain-classifier", "jailbreak-guard", "pii-detector"} <= names
    encoder = next(m for m in models if m["name"] == "minilm-embedding")
    assert encoder["input_max_tokens"] > 0 and encoder["max_sequence_length"] == encoder["input_max_tokens"]
    assert [m["name"] for m in embeddings] == ["minilm-embedding"] and embeddings[0]["dimensions"] == [384]
    assert (
        len(runtime) == 1
        and runtime[0].items()
        >= {
            "name": "Embedding",
            "artifact": "minilm-embedding",
            "process": None,
            "state": "ready",
            "ready": True,
            "reason": None,
            "restarts": None,  # no live facts without a provider (tests/unit/management/test_live_inventory.py)
        }.items()
    )
    assert classifier.status_code == 200 and classifier.json()["decisions"][0]["name"] == "math"
    assert {"models", "system"} <= set(info_models) and "gpu_available" in info_models["system"]
    assert info_classifier["status"] == "active" and info_classifier["decisions"][0]["name"] == "math"
    assert metrics.status_code == 501 and error_code(metrics) == "NOT_IMPLEMENTED"
    assert combined.status_code == 501
    assert router_config.status_code == 404


# ------------------------------------------------------------------ routing preview
@pytest.mark.slow
async def test_routing_preview_evaluates_signals_and_selection_without_backend_calls():
    h = Harness()
    async with h.client() as c:
        math = await c.post(
            "/api/v1/routing/preview",
            json={
                "messages": [{"role": "user", "content": "solve this integral"}],
                "preview_context": {"seed": 3},
            },
        )
        plain = (
            await c.post(
                "/api/v1/routing/preview",
                json={"model": "auto", "messages": [{"role": "user", "content": "hello"}]},
            )
        ).json()
        explicit = (
            await c.post(
                "/api/v1/routing/preview",
                json={"model": "small", "messages": [{"role": "user", "content": "hello"}]},
            )
        ).json()
        unknown = await c.post(
            "/api/v1/routing/preview",
            json={"model": "nope", "messages": [{"role": "user", "content": "hello"}]},
        )
        empty = await c.post("/api/v1/routing/preview", json={"messages": []})
    body = math.json()
    assert math.status_code == 200
    assert (body["decision"], body["selected_model"], body["selection_status"]) == ("math", "big", "selected")
    assert body["selection_method"] == "static" and body["selection_provenance"] == "preview"
    assert body["backend_calls"] == 0 and body["persisted"] is False
    assert any(s["name"] == "math_kw" and s["matched"] for s in body["signals"])
    assert plain["decision"] is None and plain["selected_model"] == "small"
    assert plain["selection_method"] == "default_model"
    assert explicit["selection_method"] == "model_specified"
    assert unknown.status_code == 404 and empty.status_code == 400


@pytest.mark.slow
async def test_routing_preview_unavailable_and_deadline():
    h = Harness()
    h.management.previewer = None
    async with h.client() as c:
        r = await c.post("/api/v1/routing/preview", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 503

    class Never:
        async def preview(self, request, headers=None, seed=None):
            await asyncio.Event().wait()  # never answers: only the deadline ends the call
            return {}

    h.management.preview_deadline_s = 0.05
    h.management.previewer = Never()
    async with h.client() as c:
        r = await c.post("/api/v1/routing/preview", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 408 and error_code(r) == "TIMEOUT_ERROR"


# ------------------------------------------------------------------ replays and outcomes
def replay(i: int, model: str, decision: str, **extra: Any) -> dict[str, Any]:
    return {
        "request_id": f"r{i}",
        "selected_model": model,
        "decision": decision,
        "reason_code": "auto_routing",
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        "cost": {"amount": 0.5, "currency": "USD"},
        "latency_ms": 100.0 + i,
        "request": {"messages": [{"role": "user", "content": f"private text {i}"}]},
        "upstream_headers": {"authorization": f"Bearer {SECRET}"},
        **extra,
    }


def test_replay_store_is_bounded_and_aggregates():
    store = ReplayStore(capacity=3)
    ids = [store.record(replay(i, "big" if i % 2 else "small", "math" if i % 2 else "")) for i in range(5)]
    assert len(store) == 3 and store.get(ids[0]) is None and store.get(ids[4]) is not None
    page = store.list(limit=2)
    assert [r["request_id"] for r in page.records] == ["r2", "r3"] and page.has_more
    assert store.list(after_sequence=page.next_sequence).records[0]["request_id"] == "r4"
    agg = store.aggregate()
    assert agg.total == 3 and agg.by_model["small"].requests == 2 and agg.cost == {"USD": 1.5}
    assert agg.by_model["big"].prompt_tokens == 10 and agg.by_decision == {"": 2, "math": 1}
    assert store.aggregate(model="big").total == 1


@pytest.mark.slow
async def test_replay_routes_redact_content_and_secrets():
    store = ReplayStore()
    rid = store.record(replay(1, "big", "math"))
    store.record(replay(2, "small", ""))
    h = Harness(replays=store)
    async with h.client() as c:
        listed = await c.get("/api/v1/observability/replays", params={"model": "big"})
        one = await c.get(f"/api/v1/observability/replays/{rid}")
        missing = await c.get("/api/v1/observability/replays/nope")
        agg = (await c.get("/api/v1/observability/replays/aggregate")).json()
    assert listed.status_code == 200 and [r["id"] for r in listed.json()["records"]] == [rid]
    assert one.json()["request_id"] == "r1"
    assert SECRET not in one.text and one.json()["upstream_headers"]["authorization"] == REDACTED
    # auth off: data.read is held, so content is visible; secrets never without secret_view
    assert "private text 1" in one.text
    assert missing.status_code == 404
    assert agg["total"] == 2 and agg["by_model"]["big"]["cost"] == {"USD": 0.5}


async def test_replays_not_enabled_is_404_feature_disabled():
    """A feature that is off is no server fault (docs/management-api.md, "A feature that is off")."""
    async with Harness().client() as c:
        answer = await c.get("/api/v1/observability/replays")
    assert answer.status_code == 404 and error_code(answer) == "FEATURE_DISABLED", answer.text


async def test_outcomes_with_idempotency_key():
    store = ReplayStore()
    rid = store.record(replay(1, "big", "math"))
    h = Harness(replays=store)
    body = {"replay_id": rid, "target": "big", "verdict": "good", "score": 0.9, "source": "spoofed"}
    async with h.client() as c:
        first = await c.post("/api/v1/observability/outcomes", json=body, headers={"Idempotency-Key": "k1"})
        again = await c.post("/api/v1/observability/outcomes", json=body, headers={"Idempotency-Key": "k1"})
        conflict = await c.post(
            "/api/v1/observability/outcomes",
            json={**body, "verdict": "bad"},
            headers={"Idempotency-Key": "k1"},
        )
        unknown = await c.post("/api/v1/observability/outcomes", json={**body, "replay_id": "nope"})
        invalid = await c.post("/api/v1/observability/outcomes", json={"replay_id": rid})
        nan = await c.post(
            "/api/v1/observability/outcomes",
            content=b'{"replay_id":"%s","target":"a","verdict":"b","score":NaN}' % rid.encode(),
            headers={"content-type": "application/json"},
        )
        audit = (await c.get("/api/v1/observability/audit", params={"action": "outcome.submit"})).json()
    assert first.status_code == 201 and first.json()["source"] == "anonymous"
    assert again.status_code == 200 and again.json()["outcome_id"] == first.json()["outcome_id"]
    assert again.json()["idempotent_replay"] is True
    assert conflict.status_code == 409 and unknown.status_code == 404
    assert invalid.status_code == 400 and nan.status_code == 400
    assert len(h.parts.replays.outcomes.list()) == 1
    assert [e["status"] for e in audit["entries"]] == [201, 200, 409, 404, 400, 400]


async def test_default_management_of_create_app_is_read_only():
    from app.api.app import StaticConfigView, create_app
    from app.config.loader import parse_config
    from app.upstream.client import UpstreamClient
    from tests.unit.management.test_management_support import base_document, etag

    app = create_app(None, UpstreamClient(), StaticConfigView(parse_config(base_document()).config))  # type: ignore[arg-type]
    import httpx

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") as c:
        view = (await c.get("/api/v1/config/hash")).json()
        r = await c.patch(
            "/api/v1/config",
            json={"routing": {"strategy": "confidence"}},
            headers={"If-Match": await etag(c)},
        )
        preview = await c.post(
            "/api/v1/routing/preview", json={"messages": [{"role": "user", "content": "x"}]}
        )
    assert view["activation_status"] == "unknown"
    assert r.status_code == 503 and error_code(r) == "ACTIVATION_UNAVAILABLE"
    assert preview.status_code == 503
