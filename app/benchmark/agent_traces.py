"""`svc-sr benchmark agent TRACES`: per-turn against session-aware routing on replayed agent
conversations (docs/routing-quality.md "Agent traffic").

A trace file is JSONL, one conversation a line (`AgentTrace`): its system prompt and its turns,
each the messages it adds to the conversation (an assistant answer, tool calls and results, a
user turn) and labels: the decision the human's ask expects, the turn's kind (`ask`,
`new_ask`, `followup`, `tool`) and whether tool results or reminders in it speak of another
domain. Every turn is one request carrying the whole conversation so far, routed in order
through the config's pipeline in this process, twice: with `global.router.session_affinity`
off (per turn) and on (the config's settings; enabled when the file leaves it off).

Measured per mode: model switches (a turn served by another model than the turn before it),
continuity violations (a switch on a turn that answers a pending tool call), the estimated
cost with prefix-cache pricing (`Pricing.turn_cost`), routing accuracy on the human's asks (the served
model is the expected decision's model) and how often the decision follows the human's ask
(is the decision of that ask sent alone) on turns whose tool results or reminders speak of
another domain and whose latest ask names its subject (a `vague` follow-up is the session's to
judge); rates with 95% Wilson intervals.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from app.benchmark.guard_report import Rate
from app.benchmark.local_services import local_services, shared_vector_table
from app.common.chat_text import human_ask, pending_tool_call
from app.config.document import RouterConfig
from app.config.pricing import Pricing
from app.pipeline.pipeline import RouterPipeline
from app.pipeline.signals.base import estimate_tokens

COMPLETION_TOKENS = 200  # each turn's answer, for the cost estimate
Mode = Literal["per_turn", "session"]


class TraceError(ValueError):
    """A trace file that cannot be read (path and line in the message)."""


class TurnLabel(BaseModel):
    expected: str  # the decision the human's ask expects
    kind: Literal["ask", "new_ask", "followup", "tool"]
    other_domain: bool = False  # tool results or reminders in the turn speak of another domain
    # the latest human ask is a follow-up that names no subject ("ok, go ahead"): only the
    # session knows what it is about
    vague: bool = False


class TraceTurn(BaseModel):
    add: list[dict[str, Any]] = Field(min_length=1)
    label: TurnLabel


class AgentTrace(BaseModel):
    id: str
    kind: str = "agent"
    split: str = "heldout"
    system: str | None = None
    tools: list[dict[str, Any]] | None = None  # the agent's tool definitions, sent on every turn
    turns: list[TraceTurn] = Field(min_length=1)


class TurnResult(BaseModel):
    trace: str
    turn: int
    label: TurnLabel
    decision: str | None
    ask_decision: str | None  # the decision of the human's ask sent alone (other-domain turns)
    model: str | None
    pending: bool
    switched: bool
    cost: float


class ModeReport(BaseModel):
    mode: Mode
    turns: int
    switches: int
    violations: int
    cost: float
    accuracy: Rate  # asks (ask, new_ask, followup) served by the expected decision's model
    accuracy_named: Rate  # the asks that name their subject (ask, new_ask), the same way
    follows_ask: Rate  # other-domain turns whose decision is the one of their human's ask alone


class AgentReport(BaseModel):
    traces: int
    split: str | None
    per_turn: ModeReport
    session: ModeReport

    def summary(self) -> dict[str, Any]:
        base, sess = self.per_turn, self.session
        fewer = 1 - sess.switches / base.switches if base.switches else 0.0
        return {
            "switches_per_turn": base.switches,
            "switches_session": sess.switches,
            "fewer_switches": round(fewer, 4),
            "violations_per_turn": base.violations,
            "violations_session": sess.violations,
            "cost_per_turn": round(base.cost, 6),
            "cost_session": round(sess.cost, 6),
            "accuracy_per_turn": round(base.accuracy.rate, 4),
            "accuracy_session": round(sess.accuracy.rate, 4),
            "accuracy_named_per_turn": round(base.accuracy_named.rate, 4),
            "accuracy_named_session": round(sess.accuracy_named.rate, 4),
            "follows_ask": round(sess.follows_ask.rate, 4),
        }


def load_traces(path: Path, split: str | None = None) -> list[AgentTrace]:
    """A JSONL file, or a gzip-compressed one (`.gz`: the long-context set is mostly repeated
    text)."""
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: {exc}") from None
    traces = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            trace = AgentTrace.model_validate(json.loads(line))
        except (ValueError, ValidationError) as exc:
            raise TraceError(f"{path}:{number}: {exc}") from None
        if split is None or trace.split == split:
            traces.append(trace)
    return traces


def with_sessions(config: RouterConfig, on: bool) -> RouterConfig:
    data = config.model_dump(by_alias=True, exclude_unset=True)
    router = data.setdefault("global", {}).setdefault("router", {})
    router.setdefault("session_affinity", {})["enabled"] = on
    return RouterConfig.model_validate(data)


async def run_mode(config: RouterConfig, traces: Sequence[AgentTrace], mode: Mode) -> list[TurnResult]:
    """Route every turn of every trace, in order, with session affinity on or off."""
    loaded = with_sessions(config, mode == "session")
    table = shared_vector_table()
    local = local_services(loaded, table)
    pricing = {m.name: m.pricing for m in loaded.providers.models}
    out: list[TurnResult] = []
    try:
        pipeline = RouterPipeline(loaded, local.services, rng=random.Random(0))
        await pipeline.warm_up()
        for trace in traces:
            out += await _replay(pipeline, trace, pricing)
    finally:
        await local.aclose()
    return out


async def _replay(
    pipeline: RouterPipeline, trace: AgentTrace, pricing: dict[str, Pricing | None]
) -> list[TurnResult]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": trace.system}] if trace.system else []
    out: list[TurnResult] = []
    model: str | None = None
    # each model's prefix cache of this conversation, in tokens: a provider keeps one per model,
    # so a turn that comes back to a model reads what that model cached when it last served
    cached: dict[str, int] = {}
    for index, turn in enumerate(trace.turns):
        messages += turn.add
        body: dict[str, Any] = {"model": "MoM", "messages": [dict(m) for m in messages]}
        if trace.tools:
            body["tools"] = trace.tools
        plan = await pipeline.route(body, {"x-session-id": trace.id}, f"{trace.id}-{index}")
        prompt = estimate_tokens(json.dumps([messages, trace.tools], ensure_ascii=False))
        served = plan.selected_model
        switched = model is not None and served != model
        alone = None
        if turn.label.other_domain and not turn.label.vague:  # what the ask alone is routed to
            bare = {"model": "MoM", "messages": [{"role": "user", "content": human_ask(messages)}]}
            alone = (await pipeline.route(bare, {}, f"{trace.id}-{index}-ask")).decision
        rates = pricing.get(served or "")
        cost = rates.turn_cost(prompt, cached.get(served or "", 0), COMPLETION_TOKENS) if rates else 0.0
        out.append(
            TurnResult(
                trace=trace.id,
                turn=index,
                label=turn.label,
                decision=plan.decision,
                ask_decision=alone,
                model=served,
                pending=pending_tool_call(messages),
                switched=switched,
                cost=cost,
            )
        )
        model = served
        messages.append({"role": "assistant", "content": f"(answer to: {human_ask(messages)[:40]})"})
        # the cached prefix ends with the answer as the next turn sends it back
        cached[served or ""] = estimate_tokens(json.dumps([messages, trace.tools], ensure_ascii=False))
    return out


def mode_report(mode: Mode, results: Sequence[TurnResult], expected_models: dict[str, str]) -> ModeReport:
    asks = [r for r in results if r.label.kind != "tool"]
    named = [r for r in asks if r.label.kind != "followup"]
    others = [r for r in results if r.label.other_domain and not r.label.vague]
    return ModeReport(
        mode=mode,
        turns=len(results),
        switches=sum(r.switched for r in results),
        violations=sum(r.switched and r.pending for r in results),
        cost=sum(r.cost for r in results),
        accuracy=Rate.of(
            "accuracy", sum(r.model == expected_models.get(r.label.expected) for r in asks), len(asks)
        ),
        accuracy_named=Rate.of(
            "accuracy_named", sum(r.model == expected_models.get(r.label.expected) for r in named), len(named)
        ),
        follows_ask=Rate.of("follows_ask", sum(r.decision == r.ask_decision for r in others), len(others)),
    )


def expected_models(config: RouterConfig) -> dict[str, str]:
    """Each decision's model (its first modelRef)."""
    return {d.name: d.modelRefs[0].model for d in config.routing.decisions if d.modelRefs}


async def run_agent_benchmark(
    config: RouterConfig, traces: Sequence[AgentTrace], split: str | None
) -> AgentReport:
    models = expected_models(config)
    reports = {
        mode: mode_report(mode, await run_mode(config, traces, mode), models)
        for mode in ("per_turn", "session")
    }
    return AgentReport(
        traces=len(traces), split=split, per_turn=reports["per_turn"], session=reports["session"]
    )
