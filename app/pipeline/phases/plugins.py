"""Phase `plugins`: the decision's plugins that act on the request itself (compiled in
`app/pipeline/plugins.py`): `fast_response` answers before any model is chosen; after
selection and the cache, the request mutations `system_prompt`, reasoning toggle
(`reasoning.py`), `request_params` and `context_compression`, then the routing headers and
`header_mutation`; `tools` / `tool_selection` (`choose_tools`, async: it may embed) run just before them.
The guard plugins (`jailbreak`, `pii`) are phase `guard`, the cache plugin phase `cache`.
"""

from __future__ import annotations

from app.pipeline.answers.schemas import AnswerChecks
from app.pipeline.compiled import CompiledConfig
from app.pipeline.compression import apply_compression
from app.pipeline.headers import fill_routing_headers
from app.pipeline.plan import ImmediateResponse, RoutePlan
from app.pipeline.plugins import (
    DecisionPlugins,
    apply_header_mutation,
    apply_request_params,
    apply_system_prompt,
    completion_body,
)
from app.pipeline.reasoning import apply_reasoning
from app.pipeline.selection import Selection
from app.pipeline.signals.base import SignalContext
from app.pipeline.tools import select_tools


def answer_fast_response(plan: RoutePlan, plugins: DecisionPlugins | None) -> bool:
    """The router answers itself, no model needed; True when the decision has fast_response."""
    if plugins is None or plugins.fast_response is None:
        return False
    plan.reason_code = "fast_response"
    plan.immediate = ImmediateResponse(
        kind="fast_response",
        body=completion_body(plan.requested_model, plugins.fast_response),
        headers={"x-vsr-fast-response": "true", "x-vsr-selected-decision": plan.decision or ""},
    )
    fill_routing_headers(plan, "bypass")
    return True


async def choose_tools(
    state: CompiledConfig,
    plan: RoutePlan,
    plugins: DecisionPlugins | None,
    ctx: SignalContext,
    semantic: bool,
) -> None:
    """The decision's `tools` policy, then `tool_selection` (semantic: skipped in routing
    previews, which make no model call beyond the signals'); sets x-tools-selected's count."""
    if plugins is None or (plugins.tools is None and plugins.tool_selection is None):
        return
    outcome = await select_tools(
        plan.body,
        plugins.tools,
        plugins.tool_selection,
        query_vector=ctx.query_vector if semantic and ctx.text else None,
        embed=state.embed if semantic else None,
        cache=state.tool_vectors,
    )
    if outcome is None:
        return
    plan.tools_selected = len(outcome.kept)
    if outcome.error:
        plan.signals.errors.append(outcome.error)


def mutate_request(
    state: CompiledConfig,
    plan: RoutePlan,
    plugins: DecisionPlugins | None,
    selection: Selection,
    cache_status: str,
) -> None:
    """Rewrite the body for the selected model, then set the upstream/response headers."""
    if plugins is not None and plugins.system_prompt is not None:
        text, mode = plugins.system_prompt
        if apply_system_prompt(plan.body, text, mode):
            plan.response_headers["x-vsr-injected-system-prompt"] = "true"
    model = state.models.get(plan.selected_model)
    plan.reasoning = apply_reasoning(plan.body, model, selection.ref, state.defaults)
    if plugins is not None and plugins.request_params is not None:
        apply_request_params(plan.body, plugins.request_params)
    if plugins is not None and plugins.compression is not None:
        apply_compression(plan, plugins.compression)
    fill_routing_headers(plan, cache_status)
    if plugins is not None:  # after the routing headers: a mutation may override them
        apply_header_mutation(plugins, plan.upstream_headers, plan.upstream_headers_remove)
        plan.answer_checks = answer_checks(plan, plugins)


FACT_CHECK_NEEDED = "needs_fact_check"


def answer_checks(plan: RoutePlan, plugins: DecisionPlugins) -> AnswerChecks | None:
    """The response-side plugins the front door runs on this answer. `hallucination` with
    `require_fact_check` applies only when the fact_check rule `needs_fact_check` matched
    (a rule some decision references, so the signal phase evaluated it)."""
    halluc = plugins.hallucination
    if (
        halluc is not None
        and halluc.require_fact_check
        and FACT_CHECK_NEEDED not in plan.signals.matched("fact_check")
    ):
        halluc = None
    if plugins.response_jailbreak is None and halluc is None:
        return None
    return AnswerChecks(
        decision=plan.decision or "",
        recipe=plan.recipe,
        response_jailbreak=plugins.response_jailbreak,
        hallucination=halluc,
    )
