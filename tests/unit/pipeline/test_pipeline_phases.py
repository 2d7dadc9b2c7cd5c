"""route()'s phases one by one (app/pipeline/phases/), on a small keyword-only config: no
encoder, no cache backend, no Ray. End-to-end behaviour is test_pipeline.py's."""

from __future__ import annotations

import pickle
import random
import time
from typing import Any

import pytest

from app.config.document import RouterConfig
from app.config.loader import parse_config
from app.config.signals import JailbreakSignal
from app.pipeline.compiled import CompiledConfig
from app.pipeline.phases import guard, parse
from app.pipeline.phases.cache import _too_old, cache_partition
from app.pipeline.phases.decide import decide
from app.pipeline.phases.plugins import answer_fast_response
from app.pipeline.phases.select import pass_through, select_model
from app.pipeline.phases.signals import evaluate_families, evaluate_signals, run_guards
from app.pipeline.plan import RoutePlan, SignalMatch
from app.pipeline.preview import preview_of
from app.pipeline.selection import ModelNotFoundError
from app.pipeline.services import PipelineServices
from app.pipeline.signals.base import SignalContext


def config() -> RouterConfig:
    return parse_config(
        {
            "version": "v0.3",
            "providers": {
                "defaults": {"default_model": "small"},
                "models": [
                    {"name": "small", "backend_refs": [{"endpoint": "127.0.0.1:8000"}]},
                    {"name": "large", "backend_refs": [{"endpoint": "127.0.0.1:8001"}]},
                ],
            },
            "routing": {
                "signals": {
                    "keywords": [
                        {"name": "urgent", "keywords": ["urgent"]},
                        {"name": "hello", "keywords": ["hello"]},
                    ]
                },
                "decisions": [
                    {
                        "name": "urgent_route",
                        "priority": 10,
                        "rules": {"type": "keyword", "name": "urgent"},
                        "modelRefs": [{"model": "large"}],
                    },
                    {
                        "name": "greeting",
                        "priority": 5,
                        "rules": {"type": "keyword", "name": "hello"},
                        "modelRefs": [{"model": "small"}],
                        "plugins": [{"type": "fast_response", "configuration": {"message": "hi there"}}],
                    },
                ],
            },
        }
    ).config


@pytest.fixture
def state() -> CompiledConfig:
    return CompiledConfig(config(), PipelineServices())


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "MoM", "messages": [{"role": "user", "content": text}], **extra}


def plan_of(state: CompiledConfig, body: dict[str, Any], headers: dict[str, str] | None = None) -> RoutePlan:
    return parse.new_plan(body, parse.lower_headers(headers), None, state.auto_names)


def context(plan: RoutePlan) -> SignalContext:
    return parse.signal_context(plan, {}, PipelineServices(), prefetch_vector=False)


# -- parse ------------------------------------------------------------------------------------


def test_parse_plans_the_body_it_is_given_on_its_own_copy(state):
    # The body comes validated (a front door's exchange did it); the plan copies the top level,
    # so what a phase sets on plan.body never reaches the caller's dict.
    body = chat("hi", temperature=0.5)
    plan = plan_of(state, body)
    plan.body["temperature"] = 0.1
    assert body["temperature"] == 0.5 and plan.body["messages"] is body["messages"]
    assert pickle.loads(pickle.dumps(plan)) == plan  # the Router hop moves it as it is


def test_parse_starts_the_plan(state):
    plan = plan_of(state, chat("hi", stream=True, tools=[{}, {}]), {"X-Request-Id": "abc"})
    assert (plan.request_id, plan.auto, plan.stream, plan.tools_selected) == ("abc", True, True, 2)
    assert plan_of(state, {**chat("hi"), "model": "small"}).auto is False


# -- signals and decide -----------------------------------------------------------------------


async def test_signals_then_decide_pick_the_matching_decision(state):
    plan = plan_of(state, chat("this is urgent"))
    plan.signals, guarded = await evaluate_signals(state, context(plan), preview=False)
    assert guarded == []  # no prompt guard configured
    winner, ranked = decide(state, plan)
    assert (
        winner is not None
        and plan.decision == "urgent_route"
        and [m.name for m in ranked] == ["urgent_route"]
    )


async def test_no_matching_decision_has_zero_confidence(state):
    plan = plan_of(state, chat("weather?"))
    plan.signals, _ = await evaluate_signals(state, context(plan), preview=False)
    assert decide(state, plan) == (None, []) and plan.decision is None and plan.confidence == 0.0


class Failing:
    family = "keyword"

    def rule_names(self) -> list[str]:
        return ["urgent"]

    async def warm_up(self) -> None:
        return None

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        raise RuntimeError("boom")


async def test_a_failing_or_missing_family_yields_errored_matches(state):
    ctx = context(plan_of(state, chat("x")))
    report = await evaluate_families(
        {"keyword": Failing()}, ctx, {"keyword": frozenset({"urgent"}), "domain": frozenset({"math"})}
    )
    assert sorted(report.errors) == [
        "domain:math: no evaluator for signal type 'domain'",
        "keyword:urgent: RuntimeError: boom",
    ]
    assert "keyword" in report.timings_ms and not any(m.matched for m in report.matches)


async def test_a_guard_without_its_evaluator_errs_and_never_blocks(state):
    guarded = await run_guards(
        {}, context(plan_of(state, chat("x"))), [("jailbreak", JailbreakSignal(name="g"))]
    )
    assert [m.error for m in guarded] == ["no jailbreak evaluator to run the guard"]
    assert guard.blocking_match(guarded) is None


# -- guard ------------------------------------------------------------------------------------


def test_security_counts_allowed_pii_and_lists_unscanned_families():
    checks = guard.security_checks(
        [
            SignalMatch(
                type="pii", name="p", matched=False, detail={"detected": True, "entities": ["EMAIL_ADDRESS"]}
            ),
            SignalMatch(type="jailbreak", name="j", matched=False, detail={"unscanned": True}),
        ]
    )
    assert checks.pii_detected and checks.pii_entities == ["EMAIL_ADDRESS"]
    assert not checks.jailbreak_detected and checks.unscanned == ["jailbreak"]


def test_a_fired_pii_guard_blocks_with_403(state):
    plan = plan_of(state, chat("mail me at a@b.c"))
    fired = SignalMatch(type="pii", name="plugin:x", matched=True, detail={"denied": ["EMAIL_ADDRESS"]})
    assert guard.block_if_flagged(plan, [fired])
    assert (
        plan.immediate is not None
        and plan.immediate.status == 403
        and plan.reason_code == "pii_policy_denied"
    )
    assert plan.immediate.body["error"]["code"] == "pii_detected" and plan.selected_model is None
    assert plan.immediate.headers["x-vsr-pii-types"] == "EMAIL_ADDRESS"


# -- plugins, select ----------------------------------------------------------------------------


async def test_fast_response_answers_before_selection(state):
    plan = plan_of(state, chat("hello"))
    plan.signals, _ = await evaluate_signals(state, context(plan), preview=False)
    winner, _ = decide(state, plan)
    assert winner is not None and answer_fast_response(plan, state.plugins[winner.name])
    assert (
        plan.immediate is not None and plan.immediate.body["choices"][0]["message"]["content"] == "hi there"
    )
    assert plan.response_headers["x-cache-status"] == "bypass"


async def test_select_falls_back_to_the_default_model(state):
    plan = plan_of(state, chat("x"))
    selection = await select_model(state, plan, None, random.Random(0), context(plan))
    assert selection.model == "small" and plan.reason_code == "default_model"
    assert [t.model for t in plan.candidates][0] == "small"


def test_pass_through_refuses_an_unknown_model(state):
    plan = plan_of(state, {**chat("x"), "model": "nope"})
    with pytest.raises(ModelNotFoundError):
        pass_through(state, plan, random.Random(0))


# -- cache --------------------------------------------------------------------------------------


def test_cache_partition_separates_conversations():
    alone = cache_partition("m", "d", chat("q"))
    with_system = cache_partition(
        "m", "d", {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
    )
    assert alone == "m|d" and with_system.startswith("m|d|ctx:") and len(with_system) == len("m|d|ctx:") + 16


def test_max_age_refuses_only_older_entries():
    now = time.time()
    assert _too_old(now - 10, 1.0) and not _too_old(now - 10, 3600.0)
    assert not _too_old(now - 10, None) and not _too_old(None, 1.0)


# -- preview ------------------------------------------------------------------------------------


async def test_preview_names_the_selection_method(state):
    plan = plan_of(state, chat("urgent"))
    plan.signals, _ = await evaluate_signals(state, context(plan), preview=True)
    winner, ranked = decide(state, plan)
    await select_model(state, plan, winner.decision if winner else None, random.Random(0), context(plan))
    shown = preview_of(state, plan, ranked)
    assert (shown["selection_status"], shown["selection_method"]) == ("selected", "static")
    assert shown["matched_decisions"][0]["name"] == "urgent_route"
