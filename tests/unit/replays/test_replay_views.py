"""Replay views: session trajectory, shadow dataset manifest and blinded judge tasks
(app/replays/replay_views.py) through the management app, route order included."""

from __future__ import annotations

from typing import Any

import pytest

from app.common.redaction import REDACTED
from app.pipeline import PipelineServices
from app.pipeline.phases.parse import MAX_SESSION_ID, session_id_of
from app.replays import replay_views
from app.replays.replay_views import shadow_first
from app.replays.replays import ReplayStore
from tests.fakes.upstream import FakeUpstream
from tests.unit.management.test_management_support import Harness, base_document, error_code, with_auth

BASE = "/api/v1/observability/replays"
AUDIT_TOKEN = "audit-token-1234567890"
VIEW_TOKEN = "view-token-1234567890"
AUTH = {
    "mode": "bearer",
    "tokens": [
        {"name": "auditor", "token_env": "T_AUDIT", "permissions": ["observability.read", "audit.read"]},
        {"name": "viewer", "token_env": "T_VIEW", "permissions": ["observability.read"]},
    ],
}


def seeded() -> tuple[ReplayStore, dict[str, str]]:
    store = ReplayStore()
    ids: dict[str, str] = {}
    for i, (session, recipe) in enumerate([("s1", None), ("s2", None), ("s1", None), ("s1", "coding")]):
        rec: dict[str, Any] = {"session_id": session, "decision": f"d{i}", "served_model": "big"}
        rec |= {"matched_signals": [f"keyword:k{i}"], "cost": {"amount": 0.5, "currency": "USD"}}
        if recipe:
            rec["recipe"] = recipe
        ids[f"r{i}"] = store.record(rec)
    for i in range(6):
        shadow = {"model": "small", "response": f"shadow answer {i}"}
        rec = {"request": f"prompt {i}", "response": f"primary answer {i}", "served_model": "big"}
        ids[f"p{i}"] = store.record(rec | {"shadow": shadow, "timestamp": f"2026-01-0{i + 1}T00:00:00Z"})
    return store, ids


async def test_trajectory_is_one_session_in_order_with_outcomes_and_not_swallowed_by_replay_id():
    store, ids = seeded()
    h = Harness(replays=store)
    async with h.client() as c:
        out = await c.post(
            "/api/v1/observability/outcomes", json={"replay_id": ids["r2"], "target": "t", "verdict": "good"}
        )
        assert out.status_code == 201, out.text
        body = (await c.get(f"{BASE}/trajectory", params={"session_id": "s1"})).json()
        coding = (await c.get(f"{BASE}/trajectory", params={"session_id": "s1", "recipe": "coding"})).json()
        capped = (await c.get(f"{BASE}/trajectory", params={"session_id": "s1", "limit": 1})).json()
        missing = await c.get(f"{BASE}/trajectory")
    assert [s["replay_id"] for s in body["steps"]] == [ids["r0"], ids["r2"]]
    assert [s["decision"] for s in body["steps"]] == ["d0", "d2"] and body["steps"][0]["model"] == "big"
    assert body["steps"][1]["outcome"]["verdict"] == "good" and body["steps"][0]["outcome"] is None
    assert body["steps"][1]["matched_signals"] == ["keyword:k2"] and body["steps"][1]["cost"]["amount"] == 0.5
    assert [s["decision"] for s in coding["steps"]] == ["d3"]
    assert capped["total"] == 2 and capped["truncated"] and len(capped["steps"]) == 1
    assert missing.status_code == 400 and error_code(missing)


async def test_dataset_manifest_counts_pairs_and_pages():
    store, _ = seeded()
    async with Harness(replays=store).client() as c:
        first = (await c.get(f"{BASE}/dataset", params={"limit": 4})).json()
        rest = (await c.get(f"{BASE}/dataset", params={"after_sequence": first["next_sequence"]})).json()
        other = (await c.get(f"{BASE}/dataset", params={"recipe": "coding"})).json()
    assert (
        first["pairs"] == 4
        and first["has_more"]
        and first["models"] == [{"primary": "big", "shadow": "small"}]
    )
    assert first["first_timestamp"].startswith("2026-01-01") and first["last_timestamp"].startswith(
        "2026-01-04"
    )
    assert rest["pairs"] == 2 and not rest["has_more"] and "prompt" in first["fields"]
    assert other["pairs"] == 0


async def test_judge_tasks_are_blinded_deterministic_and_keyed_only_for_audit_read():
    store, _ = seeded()
    h = Harness(
        with_auth(base_document(), AUTH),
        environ={"T_AUDIT": AUDIT_TOKEN, "T_VIEW": VIEW_TOKEN},
        replays=store,
    )
    async with h.client(AUDIT_TOKEN) as auditor, h.client(VIEW_TOKEN) as viewer:
        keyed = (await auditor.get(f"{BASE}/dataset/judge-tasks")).json()
        again = (await auditor.get(f"{BASE}/dataset/judge-tasks")).json()
        blind = await viewer.get(f"{BASE}/dataset/judge-tasks")
    assert keyed == again and keyed["key_visible"] and len(keyed["tasks"]) == 6
    for task in keyed["tasks"]:
        a_is_shadow = task["key"]["A"] == "small"
        assert a_is_shadow == shadow_first(task["task_id"])
        assert set(task["key"].values()) == {"big", "small"}
    assert blind.status_code == 200 and not blind.json()["key_visible"]
    assert "small" not in blind.text and "big" not in blind.text
    assert all(t["key"] is None and t["answer_a"] == REDACTED for t in blind.json()["tasks"])


def test_the_blinded_order_is_about_half_each_way():
    # Record ids are random, so six tasks can all fall one way (1 in 32): the split is checked on
    # fixed ids instead; the label must not give the model away.
    firsts = [shadow_first(f"judge-{i:08x}") for i in range(400)]
    assert 160 < sum(firsts) < 240
    assert firsts == [shadow_first(f"judge-{i:08x}") for i in range(400)]


async def test_views_answer_404_feature_disabled_without_replay_recording():
    async with Harness().client() as c:
        for path in ["trajectory?session_id=x", "dataset", "dataset/judge-tasks"]:
            r = await c.get(f"{BASE}/{path}")
            assert r.status_code == 404 and error_code(r) == "FEATURE_DISABLED"


def replayed_document(base_url: str) -> dict[str, Any]:
    """base_document with the `math` decision recording replays."""
    document = base_document(base_url)
    document["routing"]["decisions"][0]["plugins"] = [{"type": "router_replay", "configuration": {}}]
    return document


@pytest.mark.slow
async def test_requests_naming_a_session_form_its_trajectory_in_turn_order():
    store = ReplayStore()
    with FakeUpstream(name="session", reply="fine") as upstream:
        h = Harness(
            replayed_document(upstream.base_url),
            replays=store,
            services=PipelineServices(record_replay=store.record),
        )
        turns = [
            ("alpha", "what is the integral of x"),
            ("beta", "a derivative of x squared"),
            ("alpha", "and the integral of x squared"),
            (None, "an integral without a session"),
            ("alpha", "now the derivative of sin x"),
        ]
        async with h.client() as c:
            replay_ids: dict[str | None, list[str]] = {}
            for session, text in turns:
                headers = {"x-session-id": session} if session else {}
                answer = await c.post(
                    "/v1/chat/completions",
                    json={"model": "MoM", "messages": [{"role": "user", "content": text}]},
                    headers=headers,
                )
                assert answer.status_code == 200, answer.text
                replay_ids.setdefault(session, []).append(answer.headers["x-vsr-replay-id"])
            alpha = (await c.get(f"{BASE}/trajectory", params={"session_id": "alpha"})).json()
            beta = (await c.get(f"{BASE}/trajectory", params={"session_id": "beta"})).json()
            unknown = (await c.get(f"{BASE}/trajectory", params={"session_id": "gamma"})).json()
    assert [s["replay_id"] for s in alpha["steps"]] == replay_ids["alpha"]
    assert [s["sequence"] for s in alpha["steps"]] == sorted(s["sequence"] for s in alpha["steps"])
    assert alpha["total"] == 3 and not alpha["truncated"]
    assert all(s["decision"] == "math" and s["model"] == "big" for s in alpha["steps"])
    assert all("keyword:math_kw" in s["matched_signals"] for s in alpha["steps"])
    assert [s["replay_id"] for s in beta["steps"]] == replay_ids["beta"]
    assert unknown["steps"] == [] and unknown["total"] == 0
    # the record carries the session (null when the client named none)
    assert store.get(replay_ids["alpha"][0])["session_id"] == "alpha"  # type: ignore[index]
    assert store.get(replay_ids[None][0])["session_id"] is None  # type: ignore[index]


async def test_replay_views_need_observability_read():
    auth = {
        "mode": "bearer",
        "tokens": [{"name": "other", "token_env": "T_OTHER", "permissions": ["config.read"]}],
    }
    h = Harness(
        with_auth(base_document(), auth), environ={"T_OTHER": "other-token-1234567890"}, replays=ReplayStore()
    )
    async with h.client("other-token-1234567890") as other, h.client() as anonymous:
        for path in ["trajectory?session_id=x", "dataset", "dataset/judge-tasks"]:
            denied = await other.get(f"{BASE}/{path}")
            assert denied.status_code == 403, (path, denied.text)
            assert (await anonymous.get(f"{BASE}/{path}")).status_code == 401


def test_a_session_id_is_the_stripped_header_when_a_trajectory_query_could_name_it():
    assert session_id_of({"x-session-id": "  chat-7 "}) == "chat-7"
    assert session_id_of({"x-session-id": "x" * MAX_SESSION_ID}) == "x" * MAX_SESSION_ID
    assert session_id_of({"x-session-id": "x" * (MAX_SESSION_ID + 1)}) is None
    assert session_id_of({"x-session-id": "   "}) is None and session_id_of({}) is None


async def test_a_long_trajectory_pages_on_after_sequence():
    store, ids = seeded()
    async with Harness(replays=store).client() as c:
        first = (await c.get(f"{BASE}/trajectory", params={"session_id": "s1", "limit": 1})).json()
        after = {"session_id": "s1", "limit": 1, "after_sequence": first["next_sequence"]}
        second = (await c.get(f"{BASE}/trajectory", params=after)).json()
    assert [s["replay_id"] for s in first["steps"]] == [ids["r0"]] and first["truncated"]
    assert [s["replay_id"] for s in second["steps"]] == [ids["r2"]] and not second["truncated"]
    assert second["total"] == 1 and second["next_sequence"] == second["steps"][0]["sequence"]


async def test_a_walk_cut_at_max_scan_says_more_may_follow_and_moves_the_cursor(monkeypatch):
    monkeypatch.setattr(replay_views, "SCAN_PAGE", 2)
    monkeypatch.setattr(replay_views, "MAX_SCAN", 3)  # two pages of two: the walk stops after 4
    store, _ = seeded()  # 4 session records (sequences 1-4), then 6 shadow pairs (5-10)
    async with Harness(replays=store).client() as c:
        cut = (await c.get(f"{BASE}/dataset")).json()
        on = (await c.get(f"{BASE}/dataset", params={"after_sequence": cut["next_sequence"]})).json()
        tasks = (await c.get(f"{BASE}/dataset/judge-tasks")).json()
        path = (await c.get(f"{BASE}/trajectory", params={"session_id": "s1", "after_sequence": 4})).json()
    assert cut["pairs"] == 0 and cut["has_more"] and cut["next_sequence"] == 4
    assert on["pairs"] == 4 and on["has_more"] and on["next_sequence"] == 8
    assert tasks["tasks"] == [] and tasks["has_more"] and tasks["next_sequence"] == 4
    assert path["steps"] == [] and path["truncated"]  # the walk did not reach the store's end
