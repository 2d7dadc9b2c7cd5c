"""Phase `signals`: the signal rules decisions reference (every configured rule for a
preview), one task per family, concurrently with the global prompt guard.

A family that fails, or has no evaluator, yields errored matches (its rules' `on_error`
decides in the engine); a guard that cannot run yields errored matches, which never block.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from app.common import tracing
from app.common.chat_text import read_digest
from app.config.signals import HarmfulSignal, JailbreakSignal, PIISignal
from app.pipeline.compiled import TEXTLESS_FAMILIES, CompiledConfig
from app.pipeline.plan import SignalMatch, SignalReport
from app.pipeline.plugins import GuardRule
from app.pipeline.signals.base import SignalContext, SignalEvaluator, error_matches
from app.srun.stage import enter_stage

log = logging.getLogger("svc_sr.pipeline")


async def evaluate_signals(
    state: CompiledConfig, ctx: SignalContext, *, preview: bool
) -> tuple[SignalReport, list[SignalMatch]]:
    """(the signal report, the global guard's matches)."""
    wanted = state.all_signal_names() if preview else state.referenced
    enter_stage(ctx)  # the request's model-runtime questions bundle per deployment (app/srun/stage.py)
    report, guards = await asyncio.gather(
        evaluate_families(state.evaluators, ctx, wanted),
        run_guards(state.evaluators, ctx, state.global_guards()),
    )
    note_reads(report.matches, ctx, state.rule_reads)
    return report, guards


def note_reads(
    matches: list[SignalMatch], ctx: SignalContext, reads: Mapping[tuple[str, str], tuple[str, ...]]
) -> None:
    """Say on each text-reading match which parts of the request its rule read and a digest of
    that text (app/common/chat_text.py `read_digest`): what the preview and the replay record
    show, never the text itself."""
    digests: dict[str, str] = {}
    for match in matches:
        if match.type in TEXTLESS_FAMILIES:
            continue
        read = reads.get((match.type, match.name), ())
        text = ctx.whole_text_for(read) if read else ctx.text
        digest = digests.get(text)
        if digest is None:
            digest = digests[text] = read_digest(text)
        first = "conversation" if "conversation" in read else "latest_ask"
        match.read = [first, *(p for p in read if p in ("tool_results", "system"))]
        match.read_digest = digest


async def evaluate_families(
    evaluators: Mapping[str, SignalEvaluator], ctx: SignalContext, wanted: Mapping[str, frozenset[str]]
) -> SignalReport:
    report = SignalReport()
    jobs = []
    for family, names in wanted.items():
        evaluator = evaluators.get(family)
        if evaluator is None:
            report.matches.extend(error_matches(family, names, f"no evaluator for signal type {family!r}"))
        elif names:
            jobs.append(_run_family(evaluator, ctx, names))
    for family, matches, elapsed in await asyncio.gather(*jobs):
        report.matches.extend(matches)
        report.timings_ms[family] = round(elapsed, 3)
    report.errors = [f"{m.type}:{m.name}: {m.error}" for m in report.matches if m.error]
    return report


async def _run_family(
    evaluator: SignalEvaluator, ctx: SignalContext, names: frozenset[str]
) -> tuple[str, list[SignalMatch], float]:
    started = time.perf_counter()
    with tracing.span("svc_sr.signal", attributes={"svc_sr.signal.family": evaluator.family}) as span:
        try:
            matches = await evaluator.evaluate(ctx, names)
        except Exception as exc:  # one family failing must not fail routing: on_error decides
            log.warning("signal family %s failed: %s", evaluator.family, exc)
            matches = error_matches(evaluator.family, names, f"{type(exc).__name__}: {exc}")
        matched = sorted(m.name for m in matches if m.matched and not m.error)
        tracing.set_attributes(span, {"svc_sr.signal.matched": matched, "svc_sr.signal.rules": len(names)})
    return evaluator.family, matches, (time.perf_counter() - started) * 1000


async def run_guards(
    evaluators: Mapping[str, SignalEvaluator], ctx: SignalContext, checks: list[GuardRule]
) -> list[SignalMatch]:
    """Run guard rules (not configured signals) on their family's evaluator, concurrently."""
    parts = await asyncio.gather(
        *(_run_guard(evaluators.get(family), family, rule, ctx) for family, rule in checks)
    )
    return [m for part in parts for m in part]


async def _run_guard(
    evaluator: SignalEvaluator | None,
    family: str,
    rule: PIISignal | JailbreakSignal | HarmfulSignal,
    ctx: SignalContext,
) -> list[SignalMatch]:
    name = rule.name
    run = getattr(evaluator, "evaluate_rules", None)
    if run is None:
        return error_matches(family, {name}, f"no {family} evaluator to run the guard")
    with tracing.span(
        "svc_sr.signal", attributes={"svc_sr.signal.family": family, "svc_sr.guard": name}
    ) as span:
        try:
            matches = list(await run(ctx, [rule]))
        except Exception as exc:
            log.warning("%s guard %s failed: %s", family, name, exc)
            return error_matches(family, {name}, f"{type(exc).__name__}: {exc}")
        tracing.set_attributes(span, {"svc_sr.signal.matched": [m.name for m in matches if m.matched]})
        return matches
