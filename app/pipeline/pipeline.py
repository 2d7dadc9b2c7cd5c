"""The request pipeline: `route(body) -> RoutePlan`, `complete(plan, report) -> Accounting`.

A plain library (no Ray): everything outside the process arrives as `PipelineServices`
(services.py). RouterPipeline orchestrates route()'s phases (app/pipeline/phases/, one
module each) over one `CompiledConfig` version (compiled.py):

for `model: MoM` / `auto` (any `config.auto_model_names`, or "vllm-sr/auto"):
1. parse: the plan of the chat body (validated by the front door, not again), the
   SignalContext (the human's ask, token count, the query embedding computed at most once
   and shared);
2. signals: only the signal rules some decision references, one task per family,
   concurrently with the global prompt guard;
3. decide: the decision rules (`decisions.py`);
4. guard: the decision's `jailbreak`, then `pii` plugins; a guard that fired blocks (403),
   or, a `pii` plugin with `action: mask | route`, masks the body (last, after every
   mutation; the front door restores the answer) or selects a private model;
5. plugins: `fast_response` answers without a model;
6. select: model selection (`selection.py`), then session-aware routing (`sessions.py`);
7. cache: response-cache lookup (a hit answers) and the write complete() performs;
8. plugins: `tools` / `tool_selection` (`tools.py`), request mutations, routing headers
   (`headers.py`), header_mutation;
9. rag: the `rag` plugin's retrieval into the request (phases/rag.py);
10. memory: the `memory` plugin's recall (phases/memory.py; complete() remembers).

Blocking (spec 01 "Errors"): with `global.model_catalog.modules.prompt_guard.enabled`
every auto request is also checked for jailbreaks (concurrently with the signals) and
blocked with 403 `security_violation`/`jailbreak_detected` when flagged; a chosen
decision's `jailbreak` plugin, then its `pii` plugin (`pii_types_allowed`) block the same
way (`pii_detected`). A guard that cannot run (no evaluator, model down) lets the request
through and reports the failure in `signal_errors`. The v0.3 alternative, a
high-priority decision on pii/jailbreak signals with `fast_response`, answers 200.
An explicit model is a pass-through: no signals, no plugins, no cache, reason
`model_specified`; an unknown one raises ModelNotFoundError (404). With
`global.router.enabled: false` an auto request goes the same way to the default model
(reason `router_disabled`).
Response cache partitions and client cache directives: phases/cache.py.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

from app.common import tracing
from app.config.document import RouterConfig
from app.keys.grant import ModelGrant
from app.pipeline.answers.checker import check_answer
from app.pipeline.answers.hallucination import CONTEXT_VECTOR_CACHE_SIZE
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict
from app.pipeline.compiled import CompiledConfig
from app.pipeline.completion import complete_request
from app.pipeline.decisions import DecisionMatch
from app.pipeline.headers import fill_routing_headers
from app.pipeline.phases import guard, parse
from app.pipeline.phases.cache import cache_step
from app.pipeline.phases.decide import decide
from app.pipeline.phases.memory import memory_step
from app.pipeline.phases.plugins import answer_fast_response, choose_tools, mutate_request
from app.pipeline.phases.rag import rag_step
from app.pipeline.phases.select import pass_through, routing_disabled, select_model, select_private
from app.pipeline.phases.signals import evaluate_signals
from app.pipeline.pii_mask import mask_body
from app.pipeline.plan import Accounting, CompletionReport, ProviderState, RoutePlan
from app.pipeline.preview import no_route_preview, preview_of
from app.pipeline.replay import REPLAY_ID_HEADER, new_capture
from app.pipeline.selection import NoRouteError
from app.pipeline.services import PipelineServices
from app.pipeline.sessions import session_step
from app.pipeline.signals.base import SignalContext
from app.pipeline.vector_cache import TextVectorCache

Ranked = list[DecisionMatch]


def route_attributes(plan: RoutePlan) -> dict[str, Any]:
    return {
        "svc_sr.request_id": plan.request_id,
        "svc_sr.decision": plan.decision,
        "svc_sr.selected_model": plan.selected_model,
        "svc_sr.reason_code": plan.reason_code,
        "svc_sr.answered": plan.immediate.kind if plan.immediate is not None else None,
        "svc_sr.pii_action": plan.pii_action,
    }


class RouterPipeline:
    def __init__(
        self, config: RouterConfig, services: PipelineServices | None = None, rng: random.Random | None = None
    ) -> None:
        self.services = services or PipelineServices()
        self.rng = rng or random.Random()
        self._state = CompiledConfig(config, self.services)
        # the hallucination check's context sentence vectors (services.embed's, so across versions)
        self._context_vectors = TextVectorCache(CONTEXT_VECTOR_CACHE_SIZE)

    @property
    def config(self) -> RouterConfig:
        return self._state.config

    async def warm_up(self) -> None:
        """Embed candidate phrases etc. now, not on the first request."""
        await self._state.warm_up()

    async def update_config(self, config: RouterConfig) -> None:
        """Hot swap: build and warm the new version aside, then switch atomically;
        requests in flight finish on the version they started with."""
        state = CompiledConfig(config, self.services)
        await state.warm_up()
        self._state = state

    async def route(
        self,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        request_id: str | None = None,
        grant: ModelGrant | None = None,
        tie: ProviderState | None = None,
    ) -> RoutePlan:
        """The plan of a validated chat body (app/pipeline/phases/parse.py says who validated it).
        `grant`: the request's API key's models and budget state (app/pipeline/grants.py);
        `tie`: the provider-side state the request continues (set by the front door)."""
        # the front door's request span, carried in `headers` across the Ray hop (traceparent)
        with tracing.span("svc_sr.route", parent=headers) as span:
            plan, _ = await self._route(body, headers, request_id, preview=False, grant=grant, tie=tie)
            tracing.set_attributes(span, route_attributes(plan))
        self._mark_replay(plan)
        self.services.metrics.on_route(plan)
        return plan

    async def preview(
        self,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Routing preview (no backend call, no cache access): every configured signal is
        evaluated, then the decision and model selection as route() would make them."""
        state = self._state
        rng = random.Random(seed) if seed is not None else None
        try:
            plan, ranked = await self._route(body, headers, None, preview=True, rng=rng, state=state)
        except NoRouteError as exc:
            return no_route_preview(exc)
        return preview_of(state.for_recipe(plan.recipe), plan, ranked)

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting:
        """Usage, cost, TTFT/TPOT, metrics, replay and the cache write (app/pipeline/completion.py)."""
        return await complete_request(self.services, plan, report)

    async def check_answer(self, checks: AnswerChecks, answer: str, context: list[str]) -> AnswerVerdict:
        """The response-side plugins on a whole answer (app/pipeline/answers/checker.py), with
        the evaluators of the recipe that routed it, on the current config version."""
        state = self._state.for_recipe(checks.recipe)
        guard = state.prompt_guard
        return await check_answer(
            state.evaluators,
            self.services.embed,
            checks,
            answer,
            context,
            guard.threshold if guard else None,
            self._context_vectors,
        )

    # -------------------------------------------------------------- the phases
    async def _route(
        self,
        body: Mapping[str, Any],
        headers: Mapping[str, str] | None,
        request_id: str | None,
        *,
        preview: bool,
        rng: random.Random | None = None,
        state: CompiledConfig | None = None,
        grant: ModelGrant | None = None,
        tie: ProviderState | None = None,
    ) -> tuple[RoutePlan, Ranked]:
        state = state or self._state  # one config version for the whole request
        rng = rng or self.rng
        lowered = parse.lower_headers(headers)
        plan = parse.new_plan(body, lowered, request_id, state.auto_names)
        plan.tie = tie  # the front door's word, never the client's body or headers
        if not plan.auto:
            pass_through(state.direct, plan, rng, grant)
            return plan, []
        state = state.for_model(plan.requested_model)  # MoM/auto: `default`; an entrypoint: its recipe
        plan.recipe = state.recipe
        if not state.routing_enabled:
            routing_disabled(state.direct, plan, rng, grant)
            return plan, []
        started = time.perf_counter()
        ctx = parse.signal_context(
            plan,
            lowered,
            self.services,
            prefetch_vector=state.prefetch_vector and not preview,
            semantic_embed=state.semantic.embed if state.semantic is not None else None,
        )
        try:
            ranked = await self._route_auto(
                state, plan, ctx, lowered, rng, preview=preview, started=started, grant=grant
            )
        finally:
            ctx.cancel()
        return plan, ranked

    async def _route_auto(
        self,
        state: CompiledConfig,
        plan: RoutePlan,
        ctx: SignalContext,
        headers: Mapping[str, str],
        rng: random.Random,
        *,
        preview: bool,
        started: float,
        grant: ModelGrant | None = None,
    ) -> Ranked:
        """An auto request's phases; each answer given on the way (block, fast_response, cache
        hit) ends the request there, as `plan.immediate`."""
        plan.signals, guarded = await evaluate_signals(state, ctx, preview=preview)
        with tracing.span("svc_sr.decision") as span:
            winner, ranked = decide(state, plan)
            tracing.set_attributes(span, {"svc_sr.decision": plan.decision, "svc_sr.candidates": len(ranked)})
        decision = winner.decision if winner else None
        plugins = state.plugins.get(decision.name) if decision else None
        guarded = await guard.check_decision_guards(state, ctx, decision, guarded)
        guard.record_guards(plan, guarded)
        plan.classification_ms = (time.perf_counter() - started) * 1000
        blocking = guard.take_pii_action(state, plan, ctx, decision, plugins, guarded)
        if guard.block_if_flagged(plan, blocking) or answer_fast_response(plan, plugins):
            return ranked
        selection = await select_model(state, plan, decision, rng, ctx, grant)
        if plan.pii_action == "route":
            private = select_private(state, plan, decision, rng, grant)
            if private is None:  # no private model can serve it: refused as `block` would
                guard.block_if_flagged(plan, guarded)
                return ranked
            selection = private
        if plan.pii_action != "route":  # a private route is PII's to choose, never a session's
            await session_step(self.services.sessions, state, plan, ctx, rng, preview=preview, grant=grant)
        cache_status = "bypass"
        if not preview:
            with tracing.span("svc_sr.cache.lookup") as span:
                cache_status = await cache_step(self.services, state, plan, ctx, plugins, headers)
                tracing.set_attributes(span, {"svc_sr.cache.status": cache_status})
            if plan.immediate is not None:
                fill_routing_headers(plan, cache_status)
                return ranked
        await choose_tools(state, plan, plugins, ctx, semantic=not preview)
        mutate_request(state, plan, plugins, selection, cache_status)
        if not preview and plugins is not None:
            await rag_step(self.services, plan, plugins.rag, ctx)
            if plan.immediate is not None:  # on_error: fail and the store is down
                return ranked
            await memory_step(self.services, plan, plugins.memory, ctx, headers)
        if plan.pii_mask:  # last: whatever the plugins put in the body is masked too
            mask_body(plan.body, plan.pii_mask)
            plan.memory_write = None  # a memory would keep the originals
        return ranked

    def _mark_replay(self, plan: RoutePlan) -> None:
        recorded = self.services.capture_replays or self.services.record_replay is not None
        if not recorded or plan.decision is None:
            return
        plugins = self._state.for_recipe(plan.recipe).plugins.get(plan.decision)
        if plugins is None or plugins.replay is None:
            return
        plan.replay = new_capture(plugins.replay)
        plan.response_headers[REPLAY_ID_HEADER] = plan.replay.replay_id


__all__ = ["RouterPipeline"]
