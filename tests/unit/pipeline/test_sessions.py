"""Session-aware routing (app/pipeline/sessions.py): the session key, the hard lock of a
pending tool call, a switch weighed against its prefix-cache price, the headers and record,
and a store that is down (per-turn routing, never a failed request)."""

from __future__ import annotations

import asyncio
import copy
import random
from typing import Any

import pytest

from app.config.global_config import SessionAffinity
from app.config.loader import parse_config
from app.config.pricing import Pricing
from app.keys.grant import ModelGrant
from app.pipeline import RouterPipeline
from app.pipeline.plan import ProviderState, RoutePlan
from app.pipeline.services import PipelineServices
from app.pipeline.sessions import session_key, switch_terms
from app.state.session_store import MemorySessionStore, RedisSessionStore, SessionState, session_store
from app.state.shared_store import ManagementStoreSettings, StoreUnavailable
from tests.fakes.configs import keyword_routing


def document(switch_value: float = 0.002) -> dict[str, Any]:
    routes = [("finance", 20, ["tax", "stock"], "finance"), ("code", 10, ["bug", "function"], "code")]
    return keyword_routing("http://127.0.0.1:9/v1", routes, "general", switch_value=switch_value)


def pipeline(store: Any = None, doc: dict[str, Any] | None = None) -> RouterPipeline:
    services = PipelineServices(sessions=store if store is not None else MemorySessionStore())
    return RouterPipeline(parse_config(doc or document()).config, services, rng=random.Random(0))


def ask(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
}


def route(pipe: RouterPipeline, messages: list[dict[str, Any]], session: str | None = "s1") -> RoutePlan:
    headers = {"x-session-id": session} if session else {}
    return asyncio.run(pipe.route({"model": "MoM", "messages": copy.deepcopy(messages)}, headers))


def test_the_session_key_is_the_header_then_user_then_the_fingerprint():
    messages = [{"role": "system", "content": "agent"}, ask("fix the bug")]
    plan = RoutePlan(request_id="r", requested_model="MoM", auto=True, session_id="abc")
    assert session_key(plan, {}, messages, True) == ("abc", "header")
    plan.session_id = None
    key, source = session_key(plan, {"user": "alice@example.com"}, messages, True) or ("", "")
    assert source == "user" and "alice" not in key
    first = session_key(plan, {}, messages, True)
    later = session_key(plan, {}, [*messages, CALL, {"role": "tool", "content": "x"}, ask("next")], True)
    assert first is not None and first == later and first[1] == "fingerprint"
    assert session_key(plan, {}, [{"role": "system", "content": "other"}, ask("fix the bug")], True) != first
    assert session_key(plan, {}, messages, False) is None


def test_a_tool_loop_stays_on_the_sessions_model_and_a_new_ask_switches():
    pipe = pipeline()
    history = [ask("fix the bug in this function")]
    first = route(pipe, history)
    assert first.selected_model == "code" and first.session is not None and first.session.action == "started"
    # the tool result speaks of stocks and taxes; the ask is unchanged, and the loop is locked anyway
    history += [CALL, {"role": "tool", "tool_call_id": "c1", "content": "tax stock tax stock"}]
    loop = route(pipe, history)
    assert loop.selected_model == "code" and loop.session is not None
    assert (loop.session.action, loop.session.reason, loop.session.tool_pending) == (
        "kept",
        "same_model",
        True,
    )
    assert loop.response_headers["x-vsr-session"] == "kept"
    history += [{"role": "assistant", "content": "fixed"}, ask("what is the tax on stock dividends?")]
    new = route(pipe, history)
    assert new.decision == "finance" and new.selected_model == "finance"
    assert new.session is not None and (new.session.action, new.session.reason) == (
        "switched",
        "gain_beats_price",
    )
    assert new.session.previous_model == "code" and new.session.turns == 2
    assert new.response_headers["x-vsr-session-reason"] == "gain_beats_price"


def test_a_pending_tool_call_is_a_hard_lock_even_when_the_turn_wants_another_model():
    store = MemorySessionStore()
    asyncio.run(store.put("s1", SessionState(model="general", turns=3), 60))
    pipe = pipeline(store)
    plan = route(pipe, [ask("fix the bug"), CALL, {"role": "tool", "tool_call_id": "c1", "content": "ok"}])
    assert plan.decision == "code" and plan.selected_model == "general"
    assert plan.session is not None and (plan.session.action, plan.session.reason) == (
        "kept",
        "tool_call_pending",
    )
    # the held model first; the turn's own model stays as the fallback should it fail
    assert [t.model for t in plan.candidates] == ["general", "code"]
    assert plan.response_headers["x-vsr-selected-model"] == "general"


def test_a_session_never_holds_a_model_outside_the_keys_grants():
    """Even a pending tool call does not keep a model the request's key may not use."""
    store = MemorySessionStore()
    asyncio.run(store.put("s1", SessionState(model="general", turns=3), 60))
    grant = ModelGrant(key_id="k1", models=["code"])
    messages = [ask("fix the bug"), CALL, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    plan = asyncio.run(
        pipeline(store).route({"model": "MoM", "messages": messages}, {"x-session-id": "s1"}, grant=grant)
    )
    assert plan.selected_model == "code" and [t.model for t in plan.candidates] == ["code"]
    assert plan.session is not None and (plan.session.action, plan.session.reason) == (
        "switched",
        "not_granted",
    )


def test_a_switch_whose_price_beats_its_gain_keeps_the_model():
    store = MemorySessionStore()
    asyncio.run(store.put("s1", SessionState(model="general", turns=1), 60))
    # 3.45 USD per 1M tokens of checkout: a long prompt costs more than a 0.0001 USD gain
    pipe = pipeline(store, document(switch_value=0.0001))
    plan = route(pipe, [ask("x " * 2000), {"role": "assistant", "content": "ok"}, ask("fix the bug")])
    assert plan.decision == "code" and plan.selected_model == "general"
    assert plan.session is not None and plan.session.reason == "price_beats_gain"
    assert plan.session.price is not None and plan.session.gain is not None
    assert plan.session.price > plan.session.gain > 0


def routed(model: str, reason_code: str, confidence: float) -> RoutePlan:
    """An auto turn's plan as the select phase leaves it."""
    return RoutePlan(
        request_id="r",
        requested_model="MoM",
        auto=True,
        selected_model=model,
        reason_code=reason_code,
        confidence=confidence,
    )


CODE = Pricing(prompt_per_1m=3, cached_input_per_1m=0.3, cache_write_per_1m=3.75, completion_per_1m=15)
GENERAL = Pricing(
    prompt_per_1m=0.5, cached_input_per_1m=0.05, cache_write_per_1m=0.625, completion_per_1m=1.5
)


def test_a_switch_is_priced_as_turns_are_paid():
    # gain: what a later turn saves (its prompt read from cache, its answer), plus the
    # decision's value; price: the new model's checkout of the prompt, once
    plan = routed("general", "auto_routing", 0.5)
    policy = SessionAffinity(switch_value=0.01, answer_tokens=100)
    gain, price = switch_terms(plan, CODE, GENERAL, 1000, policy)
    assert price == pytest.approx(1000 * (0.625 - 0.05) / 1e6)
    assert gain == pytest.approx(0.005 + (1000 * (0.3 - 0.05) + 100 * (15 - 1.5)) / 1e6)


def test_a_turn_that_asks_for_no_model_steps_down_only_with_step_down():
    # a bare follow-up matches no decision: the session keeps its task's model...
    pipe = pipeline()
    history = [ask("fix the bug in this function")]
    assert route(pipe, history).selected_model == "code"
    history += [{"role": "assistant", "content": "fixed"}, ask("ok, go ahead")]
    kept = route(pipe, history)
    assert kept.reason_code == "default_model" and kept.selected_model == "code"
    assert kept.session is not None and (kept.session.action, kept.session.reason) == ("kept", "no_decision")
    # ...unless step_down lets the saving alone move it: no decision's value in the gain
    plan = routed("general", "default_model", 0.0)
    stepped, price = switch_terms(plan, CODE, GENERAL, 1000, SessionAffinity(step_down=True))
    assert stepped == pytest.approx((1000 * 0.25 + 200 * 13.5) / 1e6) and stepped > price
    # stepping up to a dearer default is never worth it
    up, _ = switch_terms(plan, GENERAL, CODE, 1000, SessionAffinity(step_down=True))
    assert up < 0


def test_a_switch_back_pays_only_what_the_model_has_not_cached_and_counts_the_stay():
    plan = routed("code", "auto_routing", 1.0)
    policy = SessionAffinity(switch_value=0.0, answer_tokens=0)
    # code served this session until 8,000 of the 10,000 prompt tokens: its checkout is the rest
    gain, price = switch_terms(plan, GENERAL, CODE, 10_000, policy, (10_000, 8_000))
    assert price == pytest.approx(2_000 * (3.75 - 0.3) / 1e6)
    # this turn: general's cached read against code's, so moving to the dearer model loses that
    assert gain == pytest.approx(10_000 * (0.05 - 0.3) / 1e6)
    # a cold model pays the whole prefix's checkout
    _, cold = switch_terms(plan, GENERAL, CODE, 10_000, policy, (10_000, 0))
    assert cold == pytest.approx(10_000 * (3.75 - 0.3) / 1e6)
    # the old model's write of what it has not cached is part of staying's cost
    stale, _ = switch_terms(plan, GENERAL, CODE, 10_000, policy, (6_000, 8_000))
    assert stale == pytest.approx((6_000 * 0.05 + 4_000 * 0.625 - 10_000 * 0.3) / 1e6)
    # each later turn of the expected stay saves (or loses) its cached read and answer again
    ahead, _ = switch_terms(
        plan,
        GENERAL,
        CODE,
        10_000,
        SessionAffinity(switch_value=0.0, answer_tokens=0, horizon_turns=2),
        (10_000, 8_000),
    )
    assert ahead == pytest.approx(3 * gain)


def test_the_session_remembers_each_models_cache():
    store = MemorySessionStore()
    pipe = pipeline(store, document(switch_value=10.0))
    history = [ask("fix the bug in this function")]
    route(pipe, history)
    first = asyncio.run(store.get("s1"))
    assert first is not None and set(first.cached) == {"code"} and first.cached["code"] > 0
    history += [{"role": "assistant", "content": "fixed"}, ask("what is the tax on stock dividends?")]
    route(pipe, history)
    after = asyncio.run(store.get("s1"))
    assert after is not None and after.model == "finance"
    assert after.cached["code"] == first.cached["code"] and after.cached["finance"] > first.cached["code"]


def tied(pipe: RouterPipeline, text: str, tie: ProviderState) -> RoutePlan:
    body = {
        "model": "MoM",
        "messages": [ask("fix the bug"), {"role": "assistant", "content": "ok"}, ask(text)],
    }
    return asyncio.run(pipe.route(body, {"x-session-id": "s1"}, "r", tie=tie))


def test_a_provider_side_state_locks_the_session_to_the_model_that_answered():
    store = MemorySessionStore()
    pipe = pipeline(store, document(switch_value=10.0))  # any switch would be worth it
    # the stored response was answered by `code`; the new ask wants `finance`
    plan = tied(pipe, "what is the tax on stock dividends?", ProviderState(model="code"))
    assert plan.decision == "finance" and plan.selected_model == "code"
    assert [t.model for t in plan.candidates] == ["code", "finance"]
    assert plan.session is not None and (plan.session.action, plan.session.reason) == (
        "kept",
        "provider_state",
    )
    assert plan.response_headers["x-vsr-session-reason"] == "provider_state"
    kept = asyncio.run(store.get("s1"))
    assert kept is not None and (kept.model, kept.decision, kept.turns) == ("code", "finance", 1)
    assert set(kept.cached) == {"code"}
    # reasoning items: the same lock, named for it; a session that was elsewhere moves to it
    asyncio.run(store.put("s1", SessionState(model="general", turns=4), 60))
    plan = tied(pipe, "what is the tax on stock dividends?", ProviderState(model="code", reasoning=True))
    assert plan.selected_model == "code" and plan.session is not None
    assert (plan.session.action, plan.session.reason) == ("switched", "reasoning_state")
    # a model no longer configured ties nothing: the turn is judged as any other
    plan = tied(pipe, "what is the tax on stock dividends?", ProviderState(model="gone"))
    assert plan.selected_model == "finance" and plan.session is not None
    assert plan.session.reason == "gain_beats_price"


class DownStore:
    shared = True

    async def get(self, key: str) -> SessionState | None:
        raise StoreUnavailable("management store: session read failed: refused")

    async def put(self, key: str, state: SessionState, ttl_seconds: int) -> None:
        raise StoreUnavailable("management store: session write failed: refused")


class SlowStore(DownStore):
    async def get(self, key: str) -> SessionState | None:
        await asyncio.Event().wait()  # never answers: the timeout decides
        return None


def test_a_store_that_is_down_or_slow_routes_per_turn():
    for store in (DownStore(), SlowStore()):
        doc = document()
        doc["global"]["router"]["session_affinity"]["timeout_ms"] = 20
        plan = route(pipeline(store, doc), [ask("fix the bug")])
        assert plan.selected_model == "code"
        assert plan.session is not None and (plan.session.action, plan.session.reason) == (
            "per_turn",
            "store_unavailable",
        )
        assert plan.response_headers["x-vsr-session"] == "per_turn"


def test_off_by_default_and_the_preview_reads_without_writing():
    doc = document()
    del doc["global"]
    assert route(pipeline(doc=doc), [ask("fix the bug")]).session is None
    store = MemorySessionStore()
    pipe = pipeline(store)
    body = {"model": "MoM", "messages": [ask("fix the bug")]}
    preview = asyncio.run(pipe.preview(body, {"x-session-id": "p1"}))
    assert preview["session"]["action"] == "started" and preview["session"]["key"] == "p1"
    assert asyncio.run(store.get("p1")) is None


def test_the_memory_store_expires_and_forgets_the_least_recent():
    store = MemorySessionStore(capacity=2)
    for key in ("a", "b", "c"):
        asyncio.run(store.put(key, SessionState(model=key), 60))
    assert asyncio.run(store.get("a")) is None and asyncio.run(store.get("c")) is not None
    asyncio.run(store.put("d", SessionState(model="d"), -1))
    assert asyncio.run(store.get("d")) is None


def test_the_replay_record_says_kept_or_switched_and_names_the_session():
    from app.pipeline.plan import Accounting, CompletionReport, ReplayCapture
    from app.pipeline.replay import replay_record

    pipe = pipeline()
    route(pipe, [ask("fix the bug")], session=None)
    plan = route(
        pipe, [ask("fix the bug"), CALL, {"role": "tool", "tool_call_id": "c1", "content": "tax"}], None
    )
    plan.replay = ReplayCapture(replay_id="replay-1")
    record = replay_record(plan, CompletionReport(status=200), Accounting())
    assert record["session"]["action"] == "kept" and record["session"]["source"] == "fingerprint"
    assert record["session_id"] == record["session"]["key"]
    assert record["signal_reads"]["keyword:code"]["read"] == ["latest_ask"]


def test_a_replica_keeps_sessions_in_redis_when_the_management_store_is_redis_else_in_memory():
    assert isinstance(session_store(ManagementStoreSettings(), "app"), MemorySessionStore)
    shared = session_store(ManagementStoreSettings(backend="redis", url="redis://127.0.0.1:9"), "app")
    assert isinstance(shared, RedisSessionStore) and shared.shared
    assert shared.prefix == "svc_sr:mgmt:app:session:"  # where the graph test reads them
