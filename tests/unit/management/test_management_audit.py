"""Audit log: hash chain and verify(), ring bound, paging fields, the HTTP view, and what
entries carry (metadata, never bodies)."""

from __future__ import annotations

import json

import pytest

from app.management.audit import AuditLog, verify_chain
from tests.unit.management.test_management_support import SECRET, Harness, error_code, etag


def test_chain_verifies_and_detects_tampering():
    log = AuditLog()
    for i in range(5):
        log.record("config.patch", request_id=f"r{i}", status=200)
    assert log.verify().ok and log.verify().checked == 5
    entries = log.query(limit=10).entries
    entries[2].status = 500  # edited after the fact
    result = verify_chain(entries)
    assert not result.ok and result.first_bad_sequence == 3
    relinked = log.query(limit=10).entries
    del relinked[1]
    assert verify_chain(relinked).reason == "sequence gap"


def test_ring_keeps_the_newest_and_reports_truncation():
    log = AuditLog(capacity=5)
    for i in range(12):
        log.record("a" if i % 2 else "b")
    assert len(log) == 5 and log.verify().ok
    page = log.query(limit=2, after_sequence=0)
    assert page.truncated and page.oldest_sequence == 8
    assert [e.sequence for e in page.entries] == [8, 9] and page.has_more and page.next_sequence == 9
    rest = log.query(limit=10, after_sequence=page.next_sequence)
    assert [e.sequence for e in rest.entries] == [10, 11, 12] and not rest.has_more and not rest.truncated
    only_a = log.query(action="a", limit=10)
    assert {e.action for e in only_a.entries} == {"a"}


@pytest.mark.slow
async def test_http_audit_shows_mutations_and_activations_without_bodies():
    h = Harness()
    async with h.client() as c:
        tag = await etag(c)
        await c.patch(
            "/api/v1/config",
            json={
                "providers": {
                    "models": [
                        {
                            "name": "small",
                            "backend_refs": [{"base_url": "http://127.0.0.1:9/v1", "api_key": SECRET}],
                        }
                    ],
                    "defaults": {"default_model": "small"},
                },
                "routing": {"decisions": []},
            },
            headers={"If-Match": tag, "x-request-id": "req-42"},
        )
        page = await c.get("/api/v1/observability/audit")
        activate = await c.get("/api/v1/observability/audit", params={"action": "config.activate"})
        small = await c.get("/api/v1/observability/audit", params={"limit": 1})
        bad = [
            await c.get("/api/v1/observability/audit", params=p)
            for p in ({"limit": 0}, {"limit": 1001}, {"after_sequence": -1}, {"limit": "x"})
        ]
    body = page.json()
    assert SECRET not in page.text
    actions = [e["action"] for e in body["entries"]]
    assert actions == ["config.startup", "config.activate", "config.patch"]
    assert body["entries"][0]["config"]["kind"] == "first"
    activation = activate.json()["entries"][0]
    assert activation["request_id"] == "req-42" and activation["config"]["result"] == "active"
    assert "method" not in activation or activation["method"] is None
    mutation = body["entries"][2]
    assert (mutation["method"], mutation["path"], mutation["status"]) == ("PATCH", "/api/v1/config", 200)
    assert small.json()["has_more"] and small.json()["next_sequence"] == 1
    # A parameter that fails its declaration answers the management body (INVALID_INPUT).
    assert all(r.status_code == 400 for r in bad) and error_code(bad[0]) == "INVALID_INPUT"
    assert h.management.audit.verify().ok
    assert json.dumps(body).count("sk-") == 0
