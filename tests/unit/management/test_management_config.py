"""Configuration API: reads, validate/plan, PATCH/PUT with If-Match, activation states,
versions, rollback and hot reload under load (create_app over an in-process pipeline)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import yaml

from app.common.redaction import REDACTED
from app.config.document import RouterConfig
from app.management import ActivationFailed
from tests.fakes.upstream import FakeUpstream
from tests.unit.management.test_management_support import SECRET, Harness, base_document, error_code, etag


async def preview_decision(client, text: str) -> str | None:
    r = await client.post("/api/v1/routing/preview", json={"messages": [{"role": "user", "content": text}]})
    assert r.status_code == 200, r.text
    return r.json()["decision"]


# ------------------------------------------------------------------ reads
async def test_get_config_has_etag_version_headers_and_redacts_secrets():
    h = Harness()
    async with h.client() as c:
        r = await c.get("/api/v1/config")
    assert r.status_code == 200
    assert r.headers["etag"] == f'"{r.headers["x-svc-config-hash"]}"'
    assert r.headers["x-svc-config-version"] == "1"
    ref = r.json()["providers"]["models"][1]["backend_refs"][0]
    assert ref["api_key"] == REDACTED and ref["extra_headers"] == {"x-tenant": REDACTED}
    assert SECRET not in r.text


async def test_get_config_as_yaml():
    async with Harness().client() as c:
        r = await c.get("/api/v1/config", params={"format": "yaml"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(r.text)["providers"]["defaults"]["default_model"] == "small"


@pytest.mark.slow
async def test_schema_full_progressive_and_section():
    async with Harness().client() as c:
        full = (await c.get("/api/v1/config/schema")).json()
        progressive = (await c.get("/api/v1/config/schema", params={"mode": "progressive"})).json()
        section = await c.get("/api/v1/config/schema", params={"section": "routing"})
        missing = await c.get("/api/v1/config/schema", params={"section": "nope"})
    assert "$defs" in full and "routing" in full["properties"]
    assert "$defs" not in progressive
    assert progressive["properties"]["routing"]["x-detail"].endswith("section=routing")
    assert section.status_code == 200 and section.json()["section"] == "routing"
    assert missing.status_code == 404


@pytest.mark.slow
async def test_validate_reports_paths_and_normalizes_without_writing():
    h = Harness()
    bad = base_document()
    bad["routing"]["decisions"][0]["modelRefs"][0]["model"] = "no-such-model"
    async with h.client() as c:
        before = await etag(c)
        ok = await c.post("/api/v1/config/validate", json=base_document())
        invalid = await c.post("/api/v1/config/validate", json=bad)
        broken = await c.post(
            "/api/v1/config/validate", content=b"routing: [", headers={"content-type": "application/yaml"}
        )
        after = await etag(c)
    assert ok.json()["valid"] is True and ok.json()["source_config_hash"] == before.strip('"')
    body = invalid.json()
    assert body["valid"] is False
    assert any(
        r["path"].startswith("routing.decisions[0].modelRefs[0]") and r["stage"] == "validate"
        for r in body["reasons"]
    )
    assert broken.json()["valid"] is False and broken.json()["reasons"][0]["stage"] == "parse"
    assert before == after


@pytest.mark.slow
async def test_plan_merge_lists_changes_and_candidate_etag_without_writing():
    h = Harness()
    async with h.client() as c:
        before = await etag(c)
        r = await c.post(
            "/api/v1/config/plan", json={"mode": "merge", "document": {"routing": {"strategy": "confidence"}}}
        )
        same = await c.post("/api/v1/config/plan", json={"mode": "replace", "document": base_document()})
        bad = await c.post("/api/v1/config/plan", json={"mode": "sideways", "document": {}})
        after = await etag(c)
    body = r.json()
    assert r.status_code == 200 and body["valid"] and body["changed"]
    assert body["current_etag"] == before and body["candidate_etag"] != before
    assert {"op": "add", "path": "routing.strategy", "before": None, "after": "confidence"} in body["changes"]
    assert same.json()["changed"] is False and same.json()["candidate_etag"] == before
    assert bad.status_code == 400
    assert before == after


# ------------------------------------------------------------------ mutations
@pytest.mark.slow
async def test_patch_activates_next_version_and_the_pipeline_routes_with_it():
    h = Harness()
    async with h.client() as c:
        assert await preview_decision(c, "a derivative") == "math"
        tag = await etag(c)
        patch = {"routing": {"signals": {"keywords": [{"name": "math_kw", "keywords": ["integral"]}]}}}
        r = await c.patch("/api/v1/config", json=patch, headers={"If-Match": tag})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "active" and body["activation_status"] == "active"
        assert body["config_version"] == 2
        assert body["generated_runtime_hash"] == body["active_runtime_hash"]
        assert r.headers["etag"] == body["etag"] != tag
        assert await preview_decision(c, "a derivative") is None  # the keyword is gone
        got = await c.get("/api/v1/config")
    assert got.headers["x-svc-config-version"] == "2" and got.headers["etag"] == body["etag"]
    assert h.view.current().routing.signals.keywords[0].keywords == ["integral"]


@pytest.mark.slow
async def test_missing_if_match_is_428_and_stale_is_412_with_current_etag():
    h = Harness()
    async with h.client() as c:
        tag = await etag(c)
        missing = await c.patch("/api/v1/config", json={"routing": {"strategy": "confidence"}})
        ok = await c.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
        stale = await c.put("/api/v1/config", json=base_document(), headers={"If-Match": tag})
        weak = await c.put(
            "/api/v1/config", json=base_document(), headers={"If-Match": "W/" + ok.headers["etag"]}
        )
    assert missing.status_code == 428 and error_code(missing) == "PRECONDITION_REQUIRED"
    assert missing.headers["etag"] == tag
    assert ok.status_code == 200
    assert stale.status_code == 412 and error_code(stale) == "CONFIG_CHANGED"
    assert stale.headers["etag"] == ok.headers["etag"]
    assert weak.status_code == 412


@pytest.mark.slow
async def test_two_concurrent_patches_one_wins_the_other_is_412():
    h = Harness()
    async with h.client() as c:
        tag = await etag(c)
        a, b = await asyncio.gather(
            c.patch(
                "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
            ),
            c.patch(
                "/api/v1/config",
                json={"providers": {"defaults": {"default_model": "big"}}},
                headers={"If-Match": tag},
            ),
        )
        versions = (await c.get("/api/v1/config/versions")).json()
    assert sorted([a.status_code, b.status_code]) == [200, 412]
    assert versions["total"] == 2  # startup + the winner only


@pytest.mark.slow
async def test_redacted_document_sent_back_keeps_the_real_secret():
    h = Harness()
    async with h.client() as c:
        r = await c.get("/api/v1/config")
        document = r.json()
        document["routing"]["strategy"] = "confidence"
        put = await c.put("/api/v1/config", json=document, headers={"If-Match": r.headers["etag"]})
    assert put.status_code == 200, put.text
    ref = h.management.store.document["providers"]["models"][1]["backend_refs"][0]
    assert ref["api_key"] == SECRET and ref["extra_headers"]["x-tenant"] == "tenant-secret-value"


@pytest.mark.slow
async def test_invalid_put_is_400_with_reasons_and_nothing_is_persisted():
    h = Harness()
    bad = base_document()
    bad["routing"]["decisions"][0]["rules"] = {"type": "keyword", "name": "undefined_signal"}
    bad["providers"]["models"][0]["backend_refs"][0]["weight"] = -1
    async with h.client() as c:
        tag = await etag(c)
        r = await c.put("/api/v1/config", json=bad, headers={"If-Match": tag})
        unparsable = await c.put("/api/v1/config", content=b"{not json", headers={"If-Match": tag})
        after = await etag(c)
        view = (await c.get("/api/v1/config/hash")).json()
        audit = (await c.get("/api/v1/observability/audit", params={"action": "config.reject"})).json()
    assert r.status_code == 400 and error_code(r) == "INVALID_CONFIG"
    paths = [reason.get("path") for reason in r.json()["error"]["details"]["reasons"]]
    assert any(p and p.startswith("providers.models[0].backend_refs[0].weight") for p in paths)
    assert unparsable.status_code == 400
    assert unparsable.json()["error"]["details"]["reasons"][0]["stage"] == "parse"
    assert after == tag
    assert view["last_rejection"]["persisted"] is False
    assert view["activation_status"] == "active"
    assert audit["entries"] and all(e["config"]["result"] == "rejected" for e in audit["entries"])


@pytest.mark.slow
async def test_listener_change_is_409_restart_required_and_not_persisted():
    document = base_document()
    document["listeners"] = [{"name": "http", "address": "127.0.0.1", "port": 8801}]
    h = Harness(document)
    moved = copy.deepcopy(document)
    moved["listeners"][0]["port"] = 8802
    async with h.client() as c:
        tag = await etag(c)
        r = await c.put("/api/v1/config", json=moved, headers={"If-Match": tag})
        assert await etag(c) == tag
    assert r.status_code == 409 and error_code(r) == "RESTART_REQUIRED"
    assert r.json()["error"]["details"]["reasons"][0]["path"] == "listeners[0].port"


@pytest.mark.slow
async def test_tracing_change_is_409_restart_required_and_not_persisted():
    h = Harness(base_document())
    traced = copy.deepcopy(base_document())
    traced.setdefault("global", {}).setdefault("services", {}).setdefault("observability", {})["tracing"] = {
        "enabled": True,
        "sampling": {"type": "probabilistic", "rate": 0.1},
    }
    async with h.client() as c:
        tag = await etag(c)
        r = await c.put("/api/v1/config", json=traced, headers={"If-Match": tag})
        assert await etag(c) == tag
    assert r.status_code == 409 and error_code(r) == "RESTART_REQUIRED"
    assert r.json()["error"]["details"]["reasons"][0]["path"] == "global.services.observability.tracing"


class FailingActivator:
    def __init__(self, stage: str = "warm") -> None:
        self.stage = stage
        self.calls = 0

    async def activate(self, config: RouterConfig, document: dict[str, Any]) -> None:
        self.calls += 1
        raise ActivationFailed(
            self.stage,
            "replica_refused",
            "routing.decisions[0]",  # type: ignore[arg-type]
            f"replica said no (key {SECRET})",
        )


@pytest.mark.slow
async def test_activation_failure_is_503_document_persisted_previous_generation_serves():
    activator = FailingActivator()
    h = Harness(activator=activator)
    async with h.client() as c:
        tag = await etag(c)
        r = await c.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
        got = await c.get("/api/v1/config")
        view = (await c.get("/api/v1/config/hash")).json()
        status = (await c.get("/api/v1/status")).json()
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "activation_failed" and body["error"]["code"] == "ACTIVATION_FAILED"
    reason = body["activation"]["reasons"][0]
    assert reason["stage"] == "warm" and reason["path"] == "routing.decisions[0]"
    assert SECRET not in r.text and REDACTED in reason["message"]
    # persisted: the document and ETag moved on; the serving headers trail
    assert got.json()["routing"]["strategy"] == "confidence" and got.headers["etag"] != tag
    assert got.headers["x-svc-config-version"] == "1" and got.headers["x-svc-config-hash"] == tag.strip('"')
    assert h.pipeline.config.routing.strategy == "priority"
    assert view["activation_status"] == "failed" and view["last_rejection"]["persisted"] is True
    assert view["generated_runtime_hash"] != view["active_runtime_hash"]
    converged = next(cd for cd in status["conditions"] if cd["type"] == "ConfigConverged")
    assert (converged["status"], converged["reason"]) == ("False", "ConfigActivationFailed")


@pytest.mark.slow
async def test_compile_failure_is_reported_at_stage_compile():
    def refuse(config: RouterConfig) -> None:
        if config.routing.strategy == "confidence":
            raise ValueError("cannot compile")

    h = Harness(compile_check=refuse)
    async with h.client() as c:
        r = await c.patch(
            "/api/v1/config",
            json={"routing": {"strategy": "confidence"}},
            headers={"If-Match": await etag(c)},
        )
    assert r.status_code == 503 and r.json()["activation"]["reasons"][0]["stage"] == "compile"


class GateActivator:
    """Blocks the first activation until released; records what it activated."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.activated: list[str] = []

    async def activate(self, config: RouterConfig, document: dict[str, Any]) -> None:
        if not self.activated:
            await self.gate.wait()
        self.activated.append(config.providers.defaults.default_model or "")


@pytest.mark.slow
async def test_pending_then_superseded_by_a_newer_candidate():
    activator = GateActivator()
    h = Harness(activator=activator, activation_wait_s=0.05)

    def patch(model: str) -> dict[str, Any]:
        return {"providers": {"defaults": {"default_model": model}}}

    async with h.client() as c:
        first = await c.patch("/api/v1/config", json=patch("big"), headers={"If-Match": await etag(c)})
        second = await c.patch(
            "/api/v1/config", json=patch("small"), headers={"If-Match": first.headers["etag"]}
        )
        status = (await c.get("/api/v1/status")).json()
        third = await c.patch(
            "/api/v1/config", json=patch("big"), headers={"If-Match": second.headers["etag"]}
        )
        assert h.management.activation.hash_view()["activation_status"] == "pending"
        activator.gate.set()
        await h.management.activation.drain()
        view = (await c.get("/api/v1/config/hash")).json()
        versions = (await c.get("/api/v1/config/versions")).json()["versions"]
        supersede = (await c.get("/api/v1/observability/audit", params={"action": "config.supersede"})).json()
    assert first.status_code == 202 and first.json()["status"] == "pending"
    assert second.status_code == 202
    assert third.status_code == 202
    converged = next(cd for cd in status["conditions"] if cd["type"] == "ConfigConverged")
    assert converged["reason"] == "ConfigActivationPending"
    assert activator.activated == ["big", "big"]  # the second candidate never reached the replicas
    assert [v["result"] for v in versions[:3]] == ["active", "superseded", "active"]
    assert view["activation_status"] == "active" and view["config_version"] == 3
    assert len(supersede["entries"]) == 1 and supersede["entries"][0]["config"]["previous_state"] == "pending"


# ------------------------------------------------------------------ versions and rollback
@pytest.mark.slow
async def test_versions_newest_first_limited_to_history():
    h = Harness()
    async with h.client() as c:
        tag = await etag(c)
        for i in range(12):
            r = await c.patch(
                "/api/v1/config",
                json={
                    "routing": {
                        "decisions": [
                            {
                                "name": "math",
                                "priority": i + 1,
                                "rules": {"type": "keyword", "name": "math_kw"},
                                "modelRefs": [{"model": "big"}],
                            }
                        ]
                    }
                },
                headers={"If-Match": tag},
            )
            assert r.status_code == 200
            tag = r.headers["etag"]
        default = (await c.get("/api/v1/config/versions")).json()
        three = (await c.get("/api/v1/config/versions", params={"limit": 3})).json()
        bad = await c.get("/api/v1/config/versions", params={"limit": 0})
    stamps = [v["version"] for v in default["versions"]]
    assert len(stamps) == 10 and stamps == sorted(stamps, reverse=True)
    assert default["versions"][0]["active"] and default["versions"][0]["config_version"] == 13
    assert sum(v["active"] for v in default["versions"]) == 1
    assert len(three["versions"]) == 3 and bad.status_code == 400


@pytest.mark.slow
async def test_rollback_reactivates_a_recorded_version_as_a_new_one():
    h = Harness()
    async with h.client() as c:
        tag = await etag(c)
        r = await c.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
        no_match = await c.post("/api/v1/config/rollback", json={"config_version": 1})
        unknown = await c.post(
            "/api/v1/config/rollback", json={"config_version": 99}, headers={"If-Match": r.headers["etag"]}
        )
        both = await c.post(
            "/api/v1/config/rollback",
            json={"config_version": 1, "version": 1},
            headers={"If-Match": r.headers["etag"]},
        )
        back = await c.post(
            "/api/v1/config/rollback", json={"config_version": 1}, headers={"If-Match": r.headers["etag"]}
        )
        first = (await c.get("/api/v1/config/versions")).json()["versions"][-1]
        by_stamp = await c.post(
            "/api/v1/config/rollback",
            json={"version": first["version"]},
            headers={"If-Match": back.headers["etag"]},
        )
    assert no_match.status_code == 428 and unknown.status_code == 404 and both.status_code == 400
    assert back.status_code == 200, back.text
    body = back.json()
    assert body["config_version"] == 3 and body["rollback_of"] == first["version"]
    assert body["source_config_hash"] == tag.strip('"')
    assert h.pipeline.config.routing.strategy == "priority"
    assert by_stamp.status_code == 200 and by_stamp.json()["config_version"] == 4


# ------------------------------------------------------------------ hot reload under load
@pytest.mark.slow
async def test_reload_under_load_fails_no_request():
    with FakeUpstream(name="up") as upstream:
        document = base_document(upstream.base_url)
        h = Harness(document)
        other = copy.deepcopy(document)
        other["routing"]["decisions"][0]["modelRefs"] = [{"model": "small"}]
        other["providers"]["defaults"]["default_model"] = "big"
        statuses: list[int] = []
        async with h.client() as c:

            async def chat(i: int) -> None:
                text = "an integral" if i % 2 else "hello there"
                r = await c.post(
                    "/v1/chat/completions",
                    json={"model": "MoM", "messages": [{"role": "user", "content": f"{text} {i}"}]},
                )
                statuses.append(r.status_code)

            async def reload() -> list[int]:
                codes = []
                for i in range(6):
                    tag = await etag(c)
                    r = await c.put(
                        "/api/v1/config", json=other if i % 2 == 0 else document, headers={"If-Match": tag}
                    )
                    codes.append(r.status_code)
                    await asyncio.sleep(0)
                return codes

            results = await asyncio.gather(reload(), *(chat(i) for i in range(60)))
    assert results[0] == [200] * 6
    assert statuses == [200] * 60
    assert h.management.store.active is not None and h.management.store.active.config_version == 7


@pytest.mark.slow
@pytest.mark.parametrize("body", [b"", b"[1, 2]", b"null", b"\xff\xfe"])
async def test_odd_bodies_are_clean_400s(body: bytes):
    h = Harness()
    async with h.client() as c:
        r = await c.put("/api/v1/config", content=body, headers={"If-Match": await etag(c)})
    assert r.status_code == 400 and error_code(r) == "INVALID_CONFIG"
