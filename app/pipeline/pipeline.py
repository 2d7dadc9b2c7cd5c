"""The request pipeline: `route(request) -> RoutePlan`, `complete(plan, report) -> Accounting`.

A plain library (no Ray): everything outside the process (encoder, response cache,
learned classifiers) arrives as async callables in `PipelineServices`; the Ray Router
deployment adapts DeploymentHandles to them, tests pass local implementations.

route(), for `model: MoM` / `auto` (any `config.auto_model_names`, or "vllm-sr/auto"):
1. SignalContext of the request (last user text, token count, ...);
2. only the signal rules that some decision references are evaluated, one task per
   family, concurrently; the query embedding is computed at most once and shared by
   embedding signals, other learned evaluators and the cache;
3. decision engine (`decisions.py`), model selection (`selection.py`);
4. plugins (`plugins.py`): guard checks (`jailbreak`, `pii`: 403 block), fast_response,
   response cache, system_prompt, header_mutation, reasoning toggle, request_params;
5. routing headers (`headers.py`).

Blocking (spec 01 "Errors"): with `global.model_catalog.modules.prompt_guard.enabled`
every auto request is also checked for jailbreaks (concurrently with the signals) and
blocked with 403 `security_violation`/`jailbreak_detected` when flagged; a chosen
decision's `jailbreak` plugin, then its `pii` plugin (`pii_types_allowed`) block the same
way (`pii_detected`). A guard that cannot run (no evaluator, model down) lets the request
through and reports the failure in `signal_errors`. The v0.3 alternative, a
high-priority decision on pii/jailbreak signals with `fast_response`, answers 200.
An explicit model is a pass-through: no signals, no plugins, no cache, reason
`model_specified`; an unknown one raises ModelNotFoundError (404).

Response cache partitions are f"{model}|{decision}" (decision "" when the default model
answered). Requests carrying more than their last user message (a system prompt,
earlier turns, tool results, `tools`) get a suffix "|ctx:<hash of that context>", so
one conversation's answer is never served to another conversation that merely ends
with the same question. Request header `x-vsr-cache-control` (name and allowed
directives from the plugin's `request_controls`): `no-cache` skips the lookup,
`no-store` the write, `bypass` both; `max-age=N` refuses entries older than N s,
`ttl=N` sets the written entry's lifetime.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel

from app.api.errors import security_violation
from app.cache.base import CacheHit
from app.config.models import Decision, ProviderModel, RouterConfig
from app.pipeline import decisions as engine
from app.pipeline.completion import CompletionServices, complete_request
from app.pipeline.headers import fill_routing_headers
from app.pipeline.plan import (
    Accounting,
    CacheWrite,
    CompletionReport,
    ImmediateResponse,
    RoutePlan,
    SecurityChecks,
    SignalMatch,
    SignalReport,
)
from app.pipeline.plugins import (
    CACHE_CONTROL_HEADER,
    DecisionPlugins,
    apply_header_mutation,
    apply_request_params,
    apply_system_prompt,
    compile_guards,
    compile_plugins,
    completion_body,
    effective_cache_policy,
    parse_cache_control,
    refresh_cached_completion,
)
from app.pipeline.reasoning import apply_reasoning
from app.pipeline.replay import REPLAY_ID_HEADER, new_capture
from app.pipeline.selection import (
    InvalidRequestError,
    ModelIndex,
    ModelNotFoundError,
    NoRouteError,
    RoutingError,
    Selection,
    candidates_for,
    select_for_decision,
)
from app.pipeline.signals import BUILTIN_EVALUATORS
from app.pipeline.signals.base import (
    CountTokensFn,
    EmbedFn,
    EvaluatorFactory,
    SignalContext,
    SignalEvaluator,
    content_text,
    error_matches,
)
from app.pipeline.signals.jailbreak import prompt_guard_rule
from app.pipeline.signals.runtime import SignalHost, bound_evaluators
from app.runtime.batching import MicroBatcher
from app.upstream.policy import FallbackConfig

log = logging.getLogger("svc_sr.pipeline")

EXTRA_AUTO_NAMES = frozenset({"vllm-sr/auto"})


# ------------------------------------------------------------------ services

class CacheLookup(Protocol):
    async def __call__(self, partition: str, vector: np.ndarray, threshold: float) -> Any: ...


class CacheStore(Protocol):
    async def __call__(self, partition: str, vector: np.ndarray, response: dict[str, Any], ttl_seconds: int) -> Any: ...


@dataclass
class PipelineServices(CompletionServices):
    """Everything route()/complete() call outside pure Python; complete()'s own services
    (metrics, cache_store, embed, record_replay) are CompletionServices' fields.

    embed: texts -> (n, 384) unit vectors. cache_lookup / cache_store: the response
    cache (None: caching off whatever the config says). evaluators: extra signal
    families by condition type, `(config, services) -> SignalEvaluator` (an entry for
    a built-in type replaces it). count_tokens: exact token counter for `context`
    signals (None: ceil(chars / 4)). phrase_cache: embedded candidate phrases, kept
    across hot reloads. metrics: where route()/complete() record spec 1's metrics.
    record_replay: receives the `router_replay` record of a completed request (None:
    replays are not recorded); called inline, so it must hand the record off quickly.
    capture_replays: route() marks replays although record_replay is unset here, because
    another process completes the request and records it (the Ray graph's front doors).
    model_runtimes: the host of the model-runtime deployments the config's bindings name
    (`ManagedRuntimes`); a bound family is evaluated through it instead of `evaluators`
    (app/pipeline/signals/runtime.py). Read when a config version is built.
    """

    cache_lookup: CacheLookup | None = None
    evaluators: dict[str, EvaluatorFactory] = field(default_factory=dict)
    count_tokens: CountTokensFn | None = None
    phrase_cache: dict[str, np.ndarray] = field(default_factory=dict)
    capture_replays: bool = False
    model_runtimes: SignalHost | None = None


def cache_adapters(backend: Any, offload: bool = False) -> tuple[CacheLookup, CacheStore]:
    """(cache_lookup, cache_store) over a sync `ResponseCacheBackend` (app.cache).

    The in-memory backend answers in well under a millisecond, so it is called inline;
    `offload=True` runs calls in a worker thread (network backends: Redis, Milvus).
    """

    async def lookup(partition: str, vector: np.ndarray, threshold: float) -> CacheHit | None:
        if offload:
            return await asyncio.to_thread(backend.lookup, partition, vector, threshold)
        return backend.lookup(partition, vector, threshold)

    async def store(partition: str, vector: np.ndarray, response: dict[str, Any], ttl_seconds: int) -> None:
        if offload:
            await asyncio.to_thread(backend.store, partition, vector, response, ttl_seconds)
        else:
            backend.store(partition, vector, response, ttl_seconds)

    return lookup, store


def encoder_embed(encoder: Any, max_batch_items: int = 32) -> EmbedFn:
    """EmbedFn over an in-process MiniLMEncoder, run off the event loop. Concurrent requests
    share calls: with no wait window a lone request runs at once, and requests arriving
    while a call runs go together in the next one (one thread hop for the group; the
    encoder runs their rows one by one, so a vector never depends on its batch-mates).
    Admission is the host's job (Serve's
    max_ongoing_requests), so the queue here is unbounded in practice."""
    batcher: MicroBatcher[str, np.ndarray] = MicroBatcher(
        encoder.encode, window_ms=0.0, max_batch_items=max_batch_items,
        max_queue=1_000_000, max_queued_tokens=1_000_000_000,
    )

    async def embed(texts: list[str]) -> np.ndarray:
        return np.stack(await batcher.submit_many(list(texts)))

    return embed


# ------------------------------------------------------------------ compiled config

class _Compiled:
    """Everything route() needs that depends only on the config, built once per version."""

    def __init__(self, config: RouterConfig, services: PipelineServices) -> None:
        self.config = config
        routing = config.routing
        self.decisions: list[Decision] = list(routing.decisions)
        self.strategy = routing.strategy
        self.tiered = engine.uses_tiers(self.decisions)
        self.referenced = engine.referenced_signals(self.decisions)
        self.models = ModelIndex(config)
        self.auto_names = frozenset(config.auto_model_names) | EXTRA_AUTO_NAMES
        self.global_cache = config.global_.stores.response_cache
        self.defaults = config.providers.defaults
        self.plugins: dict[str, DecisionPlugins] = {
            d.name: compile_plugins(d, self.global_cache) for d in self.decisions
        }
        # Every family is built (cheap: no model work before warm_up), so previews can show
        # unreferenced rules; route() asks each only for the names decisions reference.
        factories: dict[str, EvaluatorFactory] = {**BUILTIN_EVALUATORS, **services.evaluators}
        self.evaluators: dict[str, SignalEvaluator] = {
            family: factory(config, services) for family, factory in factories.items()
        }
        self.evaluators.update(bound_evaluators(config, services.model_runtimes))
        self.global_fallback = _global_fallback(config)
        self.prompt_guard = prompt_guard_rule(config)
        self.guards = {d.name: compile_guards(d) for d in self.decisions}
        self.prefetch_vector = bool(self.global_cache.enabled and services.cache_lookup is not None)

    def all_signal_names(self) -> dict[str, frozenset[str]]:
        out = {family: frozenset(ev.rule_names()) for family, ev in self.evaluators.items()}
        for family, names in self.referenced.items():
            out[family] = out.get(family, frozenset()) | names
        return {family: names for family, names in out.items() if names}


def _global_fallback(config: RouterConfig) -> FallbackConfig | None:
    raw = getattr(config.global_.router, "fallback", None)
    if raw is None:
        return None
    if isinstance(raw, FallbackConfig):
        return raw
    try:
        return FallbackConfig.model_validate(raw)
    except ValueError:
        log.warning("ignoring invalid global.router.fallback")
        return None


# ------------------------------------------------------------------ the pipeline

class RouterPipeline:
    def __init__(
        self, config: RouterConfig, services: PipelineServices | None = None, rng: random.Random | None = None
    ) -> None:
        self.services = services or PipelineServices()
        self.rng = rng or random.Random()
        self._state = _Compiled(config, self.services)

    @property
    def config(self) -> RouterConfig:
        return self._state.config

    async def warm_up(self) -> None:
        """Embed candidate phrases etc. now, not on the first request."""
        await _warm(self._state)

    async def update_config(self, config: RouterConfig) -> None:
        """Hot swap: build and warm the new version aside, then switch atomically;
        requests in flight finish on the version they started with."""
        state = _Compiled(config, self.services)
        await _warm(state)
        self._state = state

    # -------------------------------------------------------------- route
    async def route(
        self,
        request: BaseModel | Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        request_id: str | None = None,
    ) -> RoutePlan:
        plan, _ = await self._route(request, headers, request_id, preview=False)
        self._mark_replay(plan)
        self.services.metrics.on_route(plan)
        return plan

    def _mark_replay(self, plan: RoutePlan) -> None:
        recorded = self.services.capture_replays or self.services.record_replay is not None
        if not recorded or plan.decision is None:
            return
        plugins = self._state.plugins.get(plan.decision)
        if plugins is None or plugins.replay is None:
            return
        plan.replay = new_capture(plugins.replay)
        plan.response_headers[REPLAY_ID_HEADER] = plan.replay.replay_id

    async def preview(
        self, request: BaseModel | Mapping[str, Any], headers: Mapping[str, str] | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Routing preview (no backend call, no cache access): every configured signal is
        evaluated, then the decision and model selection as route() would make them."""
        rng = random.Random(seed) if seed is not None else None
        try:
            plan, ranked = await self._route(request, headers, None, preview=True, rng=rng)
        except NoRouteError as exc:
            return {"selection_status": "no_route", "selection_method": None, "selected_model": None,
                    "error": exc.to_body()["error"]}
        state = self._state
        decision = state.plugins.get(plan.decision or "")
        if plan.immediate is not None and plan.immediate.kind == "fast_response":
            status, method = "not_required", "fast_response"
        elif plan.immediate is not None and plan.immediate.kind == "block":
            status, method = "blocked", plan.reason_code
        elif not plan.auto:
            status, method = "selected", "model_specified"
        elif plan.reason_code == "default_model":
            status, method = "selected", "default_model"
        else:
            chosen = next((d for d in state.decisions if d.name == plan.decision), None)
            status, method = "selected", chosen.algorithm.type if chosen else "static"
        return {
            "request_id": plan.request_id,
            "requested_model": plan.requested_model,
            "auto": plan.auto,
            "decision": plan.decision,
            "selected_model": plan.selected_model,
            "confidence": plan.confidence,
            "reason_code": plan.reason_code,
            "selection_status": status,
            "selection_method": method,
            "selection_provenance": "preview",
            "matched_decisions": [
                {"name": m.name, "confidence": round(m.confidence, 4), "priority": m.decision.priority,
                 "tier": m.decision.tier} for m in ranked
            ],
            "candidates": [{"model": t.model, "target": t.label} for t in plan.candidates],
            "signals": [m.model_dump() for m in plan.signals.matches],
            "signal_errors": plan.signals.errors,
            "security_checks": plan.security.model_dump(),
            "reasoning": plan.reasoning,
            "fast_response": decision.fast_response if decision else None,
            "body": plan.body,
            "upstream_headers": plan.upstream_headers,
            "classification_ms": round(plan.classification_ms, 3),
        }

    async def _route(
        self,
        request: BaseModel | Mapping[str, Any],
        headers: Mapping[str, str] | None,
        request_id: str | None,
        *,
        preview: bool,
        rng: random.Random | None = None,
    ) -> tuple[RoutePlan, list[engine.DecisionMatch]]:
        state = self._state  # one config version for the whole request
        rng = rng or self.rng
        started_at = time.time()
        body = _body_of(request)
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        model_name = body["model"]
        tools = body.get("tools")
        plan = RoutePlan(
            request_id=request_id or headers.get("x-request-id") or uuid.uuid4().hex,
            requested_model=model_name,
            auto=model_name in state.auto_names,
            stream=body.get("stream") is True,
            body=body,
            tools_selected=len(tools) if isinstance(tools, list) else 0,
            started_at=started_at,
        )
        if not plan.auto:
            self._pass_through(state, plan, rng)
            return plan, []

        # ---- signals and decision
        t0 = time.perf_counter()
        ctx = SignalContext(
            body["messages"], embed=self.services.embed, count_tokens=self.services.count_tokens,
            headers=headers, body=body,
        )
        if state.prefetch_vector and not preview and "bypass" not in headers.get(CACHE_CONTROL_HEADER, ""):
            ctx.start_query_vector()  # the cache will need it: overlap it with the signals
        try:
            wanted = state.all_signal_names() if preview else state.referenced
            global_guard = [("jailbreak", state.prompt_guard)] if state.prompt_guard is not None else []
            plan.signals, guarded = await asyncio.gather(
                _evaluate_signals(state, ctx, wanted), _guard_checks(state, ctx, global_guard)
            )
            winner, ranked = engine.select_decision(
                state.decisions, engine.index_matches(plan.signals.matches), state.strategy, state.tiered
            )
            decision = winner.decision if winner else None
            plugins = state.plugins.get(decision.name) if decision else None
            if winner is not None:
                plan.decision = winner.name
                plan.confidence = winner.confidence
            else:
                plan.confidence = 0.0

            # ---- guard checks: the global prompt guard, then the decision's jailbreak / pii plugins
            if decision is not None and state.guards.get(decision.name) and not _blocking(guarded):
                guarded += await _guard_checks(state, ctx, state.guards[decision.name])
            _add_guard_matches(plan, guarded)
            plan.security = _security(plan.signals.matches)
            plan.classification_ms = (time.perf_counter() - t0) * 1000
            if (blocking := _blocking(guarded)) is not None:
                _block(plan, blocking)
                return plan, ranked

            # ---- fast_response: answered by the router, no model needed
            if plugins is not None and plugins.fast_response is not None:
                plan.reason_code = "fast_response"
                plan.immediate = ImmediateResponse(
                    kind="fast_response",
                    body=completion_body(plan.requested_model, plugins.fast_response),
                    headers={"x-vsr-fast-response": "true", "x-vsr-selected-decision": plan.decision or ""},
                )
                fill_routing_headers(plan, "bypass")
                return plan, ranked

            # ---- model selection
            selection = select_for_decision(decision, state.defaults.default_model, state.models, rng)
            self._apply_selection(state, plan, selection, decision)

            # ---- response cache
            cache_status = "bypass"
            if not preview:
                cache_status = await self._cache_step(state, plan, ctx, plugins, headers)
                if plan.immediate is not None:
                    fill_routing_headers(plan, cache_status)
                    return plan, ranked

            # ---- request mutations
            if plugins is not None and plugins.system_prompt is not None:
                text, mode = plugins.system_prompt
                if apply_system_prompt(plan.body, text, mode):
                    plan.response_headers["x-vsr-injected-system-prompt"] = "true"
            model = state.models.get(plan.selected_model)
            plan.reasoning = apply_reasoning(plan.body, model, selection.ref, state.defaults)
            if plugins is not None and plugins.request_params is not None:
                apply_request_params(plan.body, plugins.request_params)
            fill_routing_headers(plan, cache_status)
            if plugins is not None:  # after the routing headers: a mutation may override them
                apply_header_mutation(plugins, plan.upstream_headers, plan.upstream_headers_remove)
            return plan, ranked
        finally:
            ctx.cancel()

    def _pass_through(self, state: _Compiled, plan: RoutePlan, rng: random.Random) -> None:
        model = state.models.get(plan.requested_model)
        if model is None:
            raise ModelNotFoundError(plan.requested_model)
        candidates = candidates_for([model.name], state.models, rng)
        if not candidates:
            raise NoRouteError(f"unable to route request: model {model.name!r} has no backend_refs")
        plan.reason_code = "model_specified"
        plan.selected_model = model.name
        plan.candidates = candidates
        plan.reliability = model.reliability
        plan.fallback = state.global_fallback
        plan.pricing = _pricing([model])
        fill_routing_headers(plan, "bypass")

    def _apply_selection(
        self, state: _Compiled, plan: RoutePlan, selection: Selection, decision: Decision | None
    ) -> None:
        plan.selected_model = selection.model
        plan.candidates = selection.candidates
        plan.reason_code = "auto_routing" if selection.source == "decision" else "default_model"
        model = state.models.get(selection.model)
        plan.reliability = (decision.reliability if decision else None) or (model.reliability if model else None)
        plan.fallback = (decision.fallback if decision else None) or state.global_fallback
        served = {t.model for t in selection.candidates}
        plan.pricing = _pricing([m for name in served if (m := state.models.get(name)) is not None])

    async def _cache_step(
        self, state: _Compiled, plan: RoutePlan, ctx: SignalContext,
        plugins: DecisionPlugins | None, headers: Mapping[str, str],
    ) -> str:
        """Lookup (hit -> plan.immediate) and/or schedule the write; returns x-cache-status."""
        services = self.services
        policy = effective_cache_policy(plugins, state.global_cache)
        if not policy.enabled or not ctx.text or services.cache_lookup is None:
            return "bypass"
        control = parse_cache_control(headers.get(policy.control_header), policy.allowed)
        store = control.store and services.cache_store is not None
        if not control.lookup and not store:
            return "bypass"
        try:
            vector = await ctx.query_vector()
        except Exception as exc:  # the encoder being down must not fail the request
            log.warning("cache skipped for %s: embedding failed: %s", plan.request_id, exc)
            return "bypass"
        partition = cache_partition(plan.selected_model or "", plan.decision or "", plan.body)
        if control.lookup:
            try:
                hit = await services.cache_lookup(partition, vector, policy.threshold)
            except Exception as exc:
                log.warning("cache lookup failed for %s: %s", plan.request_id, exc)
                hit = None
            response = getattr(hit, "response", None) if hit is not None else None
            created_at = getattr(hit, "created_at", None)
            too_old = (
                control.max_age_s is not None
                and isinstance(created_at, int | float)
                and time.time() - created_at > control.max_age_s
            )
            if too_old:
                response = None  # older than the client accepts
            if isinstance(response, dict):
                similarity = float(getattr(hit, "similarity", 1.0))
                plan.immediate = ImmediateResponse(
                    kind="cache_hit",
                    body=refresh_cached_completion(response, plan.selected_model),
                    headers={"x-vsr-cache-hit": "true", "x-vsr-cache-similarity": f"{similarity:.4f}"},
                    similarity=similarity,
                )
                return "hit"
        if store:
            plan.cache_write = CacheWrite(
                partition=partition,
                ttl_seconds=policy.ttl_seconds if control.ttl_seconds is None else control.ttl_seconds,
                query_text=ctx.text,
                vector=[float(x) for x in vector],
            )
        return "miss" if control.lookup else "bypass"

    # -------------------------------------------------------------- complete
    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting:
        """Usage, cost, TTFT/TPOT, metrics, replay and the cache write (app/pipeline/completion.py)."""
        return await complete_request(self.services, plan, report)


# ------------------------------------------------------------------ helpers

async def _warm(state: _Compiled) -> None:
    await asyncio.gather(*(ev.warm_up() for ev in state.evaluators.values()))


async def _run_family(evaluator: SignalEvaluator, ctx: SignalContext, names: frozenset[str]) -> tuple[
    str, list[SignalMatch], float
]:
    started = time.perf_counter()
    try:
        matches = await evaluator.evaluate(ctx, names)
    except Exception as exc:  # one family failing must not fail routing: on_error decides
        log.warning("signal family %s failed: %s", evaluator.family, exc)
        matches = error_matches(evaluator.family, names, f"{type(exc).__name__}: {exc}")
    return evaluator.family, matches, (time.perf_counter() - started) * 1000


async def _evaluate_signals(
    state: _Compiled, ctx: SignalContext, wanted: Mapping[str, frozenset[str]]
) -> SignalReport:
    report = SignalReport()
    jobs = []
    for family, names in wanted.items():
        evaluator = state.evaluators.get(family)
        if evaluator is None:
            report.matches.extend(error_matches(family, names, f"no evaluator for signal type {family!r}"))
        elif names:
            jobs.append(_run_family(evaluator, ctx, names))
    for family, matches, elapsed in await asyncio.gather(*jobs):
        report.matches.extend(matches)
        report.timings_ms[family] = round(elapsed, 3)
    report.errors = [f"{m.type}:{m.name}: {m.error}" for m in report.matches if m.error]
    return report


async def _guard_checks(
    state: _Compiled, ctx: SignalContext, checks: list[tuple[str, Any]]
) -> list[SignalMatch]:
    """Run guard rules (not configured signals) on their family's evaluator; failures become
    errored matches, which never block."""

    async def one(family: str, rule: Any) -> list[SignalMatch]:
        evaluator = state.evaluators.get(family)
        run = getattr(evaluator, "evaluate_rules", None)
        if run is None:
            return error_matches(family, {rule.name}, f"no {family} evaluator to run the guard")
        try:
            return list(await run(ctx, [rule]))
        except Exception as exc:
            log.warning("%s guard %s failed: %s", family, rule.name, exc)
            return error_matches(family, {rule.name}, f"{type(exc).__name__}: {exc}")

    parts = await asyncio.gather(*(one(family, rule) for family, rule in checks))
    return [m for part in parts for m in part]


def _blocking(guarded: list[SignalMatch]) -> SignalMatch | None:
    return next((m for m in guarded if m.matched and not m.error), None)


def _add_guard_matches(plan: RoutePlan, guarded: list[SignalMatch]) -> None:
    plan.signals.matches.extend(guarded)
    plan.signals.errors.extend(f"{m.type}:{m.name}: {m.error}" for m in guarded if m.error)


def _block(plan: RoutePlan, match: SignalMatch) -> None:
    """403 security_violation for a guard that fired (spec 01 data-plane error body). A guard
    whose input was not scanned (`on_unscanned: block`) blocks the same way, entities
    `unscanned`."""
    unscanned = bool(match.detail.get("unscanned"))
    message = f"request blocked: the content could not be scanned ({match.type})" if unscanned else None
    if match.type == "pii":
        found = ["unscanned"] if unscanned else [
            str(t) for t in match.detail.get("denied") or match.detail.get("entities") or []]
        error = security_violation("pii_detected", found, message=message)
        plan.reason_code = "pii_policy_denied"
        headers = {"x-vsr-pii-violation": "true", "x-vsr-pii-types": ",".join(found)}
    else:
        found = ["unscanned"] if unscanned else [str(t) for t in match.detail.get("detection_types") or []]
        error = security_violation("jailbreak_detected", found, message=message)
        plan.reason_code = "jailbreak_block"
        headers = {"x-vsr-jailbreak-blocked": "true", "x-vsr-jailbreak-type": ",".join(found),
                   "x-vsr-jailbreak-confidence": f"{match.confidence:.4f}"}
    plan.selected_model = None
    plan.immediate = ImmediateResponse(kind="block", status=error.status, body=error.body(), headers=headers)
    fill_routing_headers(plan, "bypass")


def _security(matches: list[SignalMatch]) -> SecurityChecks:
    """Detections, not only policy violations: PII that a rule allows still counts as found.
    A safety signal whose input was not scanned is no detection: it is listed in `unscanned`."""
    checks = SecurityChecks()
    for m in matches:
        if m.detail.get("unscanned"):
            if m.type not in checks.unscanned:
                checks.unscanned.append(m.type)
            continue
        if m.error or not (m.matched or (m.type == "pii" and m.detail.get("detected"))):
            continue
        if m.type == "pii":
            checks.pii_detected = True
            entities = m.detail.get("entities") or m.detail.get("types") or []
            checks.pii_entities.extend(str(e) for e in entities if str(e) not in checks.pii_entities)
        elif m.type == "jailbreak":
            checks.jailbreak_detected = True
    return checks


def _body_of(request: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(request, BaseModel):
        to_body = getattr(request, "to_body", None)  # ChatCompletionRequest: the fields the client sent
        body = to_body() if callable(to_body) else request.model_dump(exclude_none=True, by_alias=True)
    elif isinstance(request, Mapping):
        body = dict(request)
    else:
        raise InvalidRequestError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequestError("model field is required")
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequestError("messages field is required")
    if not isinstance(messages, list):
        raise InvalidRequestError("messages field must be an array")
    if not messages:
        raise InvalidRequestError("messages must contain at least one message")
    return body


def cache_partition(model: str, decision: str, body: Mapping[str, Any]) -> str:
    base = f"{model}|{decision}"
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"),
                    default=-1)
    context = [
        [m.get("role"), content_text(m.get("content")), m.get("tool_calls"), m.get("tool_call_id")]
        for i, m in enumerate(messages) if i != last_user and isinstance(m, dict)
    ]
    tools = body.get("tools")
    if not context and not tools:
        return base
    digest = hashlib.sha256(json.dumps([context, tools], sort_keys=True, default=str).encode()).hexdigest()
    return f"{base}|ctx:{digest[:16]}"


def _pricing(models: list[ProviderModel]) -> dict[str, Any]:
    return {m.name: m.pricing for m in models if m.pricing is not None}


Embedder = Callable[[list[str]], Awaitable[np.ndarray]]

__all__ = [
    "CacheHit",
    "Embedder",
    "cache_adapters",
    "InvalidRequestError",
    "ModelNotFoundError",
    "NoRouteError",
    "PipelineServices",
    "RouterPipeline",
    "RoutingError",
    "cache_partition",
    "encoder_embed",
]
