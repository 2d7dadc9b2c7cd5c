"""POST /api/v1/plugins/{type}/preview: what one plugin would do to a sample request, with
nothing written (persisted false) and every model call counted (backend_calls).

The configuration is a typed candidate (`configuration`, validated against the type's model)
or the active binding (`binding` {recipe, decision}); guard, RAG and tool previews take the
binding only. Mode `preview` (the default) makes no call; `probe` (explicit) calls what the
plugin calls: the embedding for tool_selection, the Router's answer checks (the guard, the
hallucination detector) for response_jailbreak and hallucination, whose preview applies the
policy to supplied `conditions`; a RAG probe searches the binding's vector stores
(rag_probe.py), without the result cache.

Dispatcher: `PREVIEWS` maps a type to its `PreviewFn`; `register_preview(type, fn)` adds
one. A previewable type without an entry answers 501 NOT_IMPLEMENTED.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from app.api.plugins.plugin_bindings import declared_enabled, find_decision, find_plugin
from app.api.plugins.plugin_schemas import (
    AnswerConditions,
    FastResponsePreview,
    HeaderMutationPreview,
    PluginPreviewRequest,
    PluginPreviewResponse,
    PreviewBinding,
    RagPreview,
    RequestParamsPreview,
    SystemPromptPreview,
    ToolsPreview,
)
from app.api.plugins.plugins_registry import BINDING_REQUIRED, PREVIEW_TYPES, PROBE_TYPES, kind_of
from app.api.plugins.rag_probe import rag_probe
from app.common.chat_text import human_ask
from app.common.errors import validation_message
from app.common.mgmt_errors import MgmtError, invalid_input, not_implemented, unavailable
from app.config.document import RouterConfig
from app.config.global_config import ResponseCacheConfig
from app.config.plugins import (
    PLUGIN_MODELS,
    HallucinationPlugin,
    PluginConfig,
    RagPlugin,
    ResponseJailbreakPlugin,
)
from app.config.routing import Decision, Plugin
from app.exchange.answer_checks import request_context
from app.pipeline.answers.policy import Checker, preview_hallucination, preview_response_jailbreak
from app.pipeline.plugins import (
    DecisionPlugins,
    apply_header_mutation,
    apply_request_params,
    apply_system_prompt,
    compile_plugins,
    completion_body,
)
from app.pipeline.rag import KbSearch, Retrieve
from app.pipeline.signals.base import EmbedFn
from app.pipeline.tools import ToolVectorCache, select_tools


@dataclass
class PreviewContext:
    """One preview's inputs. `configuration`: the raw mapping (`enabled` folded in); `typed`:
    it validated against the type's model (None for types svc-sr does not type)."""

    plugin_type: str
    mode: str
    source: str
    binding: PreviewBinding | None
    configuration: dict[str, Any]
    typed: PluginConfig | None
    request: dict[str, Any]  # a deep copy: a preview may rewrite it
    headers: dict[str, str]
    supplied_context: list[str] | None
    config: RouterConfig  # the active configuration
    embed: EmbedFn | None  # the router's encoder (None: probes that need it answer 503)
    answer: str | None = None  # the answer a response-side probe checks
    retrieve: Retrieve | None = None  # the rag probe's vector-store search (None: it answers 503)
    kbs: KbSearch | None = None  # the rag probe's knowledge-base search (None: it answers 503)
    conditions: AnswerConditions | None = None  # a response-side preview's supplied detector outcome
    checker: Checker | None = None  # the Router's check_answer (None: response-side probes answer 503)


@dataclass
class PreviewOutcome:
    result: dict[str, Any]
    backend_calls: int = 0
    selection: dict[str, str] = field(default_factory=dict)  # selection_status / _method / selected_model


PreviewFn = Callable[[PreviewContext], Awaitable[PreviewOutcome]]
PREVIEWS: dict[str, PreviewFn] = {}


def register_preview(plugin_type: str, fn: PreviewFn) -> None:
    """Serve POST /api/v1/plugins/{plugin_type}/preview with `fn`."""
    PREVIEWS[plugin_type] = fn


async def run_preview(
    plugin_type: str,
    body: PluginPreviewRequest,
    config: RouterConfig,
    embed: EmbedFn | None,
    checker: Checker | None = None,
    retrieve: Retrieve | None = None,
    kbs: KbSearch | None = None,
) -> PluginPreviewResponse:
    if plugin_type not in PREVIEW_TYPES:
        raise invalid_input(
            f"plugin {plugin_type!r} has no preview (see its operations in GET /api/v1/plugins/{plugin_type})"
        )
    if body.mode == "probe" and plugin_type not in PROBE_TYPES:
        raise invalid_input(f"plugin {plugin_type!r} has no probe: use mode `preview`")
    if plugin_type in BINDING_REQUIRED and body.binding is None:
        raise invalid_input(f"a {plugin_type} preview takes `binding` {{recipe, decision}}, not a candidate")
    ctx = _context(plugin_type, body, config, embed, checker)
    ctx.retrieve = retrieve
    ctx.kbs = kbs
    fn = PREVIEWS.get(plugin_type)
    if fn is None:
        raise not_implemented(f"the {plugin_type} preview is not built yet")
    outcome = await fn(ctx)
    return PluginPreviewResponse(
        type=plugin_type,
        mode=body.mode,
        persisted=False,
        backend_calls=outcome.backend_calls,
        source="binding" if body.binding is not None else "candidate",
        binding=body.binding,
        enabled=ctx.configuration.get("enabled") is not False,
        applied=plugin_type in PLUGIN_MODELS,
        result=outcome.result,
        **outcome.selection,
    )


def _context(
    plugin_type: str,
    body: PluginPreviewRequest,
    config: RouterConfig,
    embed: EmbedFn | None,
    checker: Checker | None,
) -> PreviewContext:
    if body.binding is not None:
        decision = find_decision(config, body.binding.recipe, body.binding.decision)
        found = find_plugin(decision, plugin_type)
        if found is None:
            raise MgmtError(
                404,
                f"decision {decision.name!r} of recipe {body.binding.recipe!r} has no {plugin_type} plugin",
                code="NOT_FOUND",
            )
        plugin = found[1]
        raw = dict(plugin.configuration)
        raw["enabled"] = declared_enabled(plugin)
    else:
        raw = dict(body.configuration or {})
    typed: PluginConfig | None = None
    model = PLUGIN_MODELS.get(plugin_type)
    if model is not None:
        try:
            typed = model.model_validate(raw)
        except ValidationError as exc:
            message, _ = validation_message([dict(e) for e in exc.errors()])
            raise invalid_input(f"invalid {plugin_type} configuration: {message}") from None
    return PreviewContext(
        plugin_type=plugin_type,
        mode=body.mode,
        source="binding" if body.binding is not None else "candidate",
        binding=body.binding,
        configuration=raw,
        typed=typed,
        request=copy.deepcopy(body.request.model_dump(exclude_none=True)),
        headers={k.lower(): v for k, v in body.headers.items()},
        supplied_context=body.supplied_context,
        config=config,
        embed=embed,
        answer=body.answer,
        conditions=body.conditions,
        checker=checker,
    )


def _compiled(ctx: PreviewContext) -> DecisionPlugins:
    """The plugin compiled exactly as the pipeline compiles it (enabled forced on: a
    disabled plugin is previewed for what it would do)."""
    configuration = {**ctx.configuration, "enabled": True}
    decision = Decision(name="preview", plugins=[Plugin(type=ctx.plugin_type, configuration=configuration)])
    return compile_plugins(decision, ResponseCacheConfig())


# ------------------------------------------------------------------ built-in previews


async def system_prompt_preview(ctx: PreviewContext) -> PreviewOutcome:
    text, mode = _compiled(ctx).system_prompt or ("", "replace")
    injected = apply_system_prompt(ctx.request, text, mode) if text else False
    messages = ctx.request.get("messages") or []
    preview = SystemPromptPreview.model_validate({"messages": messages, "injected": injected, "mode": mode})
    return PreviewOutcome(preview.model_dump())


async def request_params_preview(ctx: PreviewContext) -> PreviewOutcome:
    settings = _compiled(ctx).request_params or {}
    changed = apply_request_params(ctx.request, settings)
    return PreviewOutcome(RequestParamsPreview(request=ctx.request, changed=changed).model_dump())


async def header_mutation_preview(ctx: PreviewContext) -> PreviewOutcome:
    headers = dict(ctx.headers)
    removed: list[str] = []
    apply_header_mutation(_compiled(ctx), headers, removed)
    return PreviewOutcome(HeaderMutationPreview(headers=headers, removed=removed).model_dump())


async def fast_response_preview(ctx: PreviewContext) -> PreviewOutcome:
    message = _compiled(ctx).fast_response or ""
    body = completion_body(ctx.request.get("model"), message)
    return PreviewOutcome(
        FastResponsePreview(response=body).model_dump(),
        selection={"selection_status": "not_required", "selection_method": "fast_response"},
    )


async def rag_preview(ctx: PreviewContext) -> PreviewOutcome:
    if ctx.mode == "probe":
        assert isinstance(ctx.typed, RagPlugin)  # the binding's configuration, validated
        result, calls = await rag_probe(ctx.typed, ctx.request, ctx.retrieve, ctx.kbs)
        return PreviewOutcome(result, backend_calls=calls)
    if not ctx.supplied_context:
        raise invalid_input("a rag preview needs `supplied_context` (the documents to inject)")
    context = "\n\n".join(ctx.supplied_context)
    text = f"Use the following context to answer.\n\n{context}"
    messages = list(ctx.request.get("messages") or [])
    apply_system_prompt(ctx.request, text, "insert")
    messages = ctx.request.get("messages") or messages
    return PreviewOutcome(
        RagPreview(injected_context=text, messages=messages, retrieval="supplied_context").model_dump()
    )


async def tools_preview(ctx: PreviewContext) -> PreviewOutcome:
    """Static policy in preview; the semantic selection only in probe (one embedding of the
    query, one of the tools)."""
    compiled = _compiled(ctx)
    probing = ctx.mode == "probe" and compiled.tool_selection is not None
    if probing and ctx.embed is None:
        raise unavailable(
            "tool_selection probe: the embedding model is not available", code="MODEL_NOT_LOADED"
        )
    query = human_ask(ctx.request.get("messages") or [])
    if probing and not query:
        raise invalid_input("a tool_selection probe needs a user message in `request.messages`")
    calls = 0
    embed = ctx.embed

    async def counted(texts: list[str]) -> np.ndarray:
        nonlocal calls
        assert embed is not None
        calls += 1
        return await embed(texts)

    async def query_vector() -> np.ndarray:
        return np.asarray(await counted([query]), dtype=np.float32).reshape(-1)

    outcome = await select_tools(
        ctx.request,
        compiled.tools,
        compiled.tool_selection,
        query_vector=query_vector if probing else None,
        embed=counted if probing else None,
        cache=ToolVectorCache(),
    )
    if outcome is None:
        preview = ToolsPreview(
            offered=[], kept=[], removed_by_policy=[], scores={}, method="none", tools_selected=0
        )
    else:
        if outcome.error:
            raise unavailable(outcome.error, code="MODEL_NOT_LOADED")
        preview = ToolsPreview(
            offered=outcome.offered,
            kept=outcome.kept,
            removed_by_policy=outcome.removed_by_policy,
            scores=outcome.scores,
            method=outcome.method,
            tools_selected=len(outcome.kept),
        )
    return PreviewOutcome(preview.model_dump(), backend_calls=calls)


async def response_jailbreak_preview(ctx: PreviewContext) -> PreviewOutcome:
    """preview: the policy on a supplied `conditions.score`; probe: the Router's guard on `answer`."""
    config = ctx.typed if isinstance(ctx.typed, ResponseJailbreakPlugin) else ResponseJailbreakPlugin()
    score = ctx.conditions.score if ctx.conditions else None
    result = await _answer_preview(
        lambda checker: preview_response_jailbreak(
            config, ctx.answer, ctx.mode == "probe", score=score, checker=checker
        ),
        ctx,
    )
    return PreviewOutcome(result, backend_calls=result.get("backend_calls", 0))


async def hallucination_preview(ctx: PreviewContext) -> PreviewOutcome:
    """preview: the policy on supplied `conditions` (unsupported_sentences or support); probe:
    the detector on `answer` against `supplied_context` (else the request's context messages)."""
    config = ctx.typed if isinstance(ctx.typed, HallucinationPlugin) else HallucinationPlugin()
    conditions = ctx.conditions or AnswerConditions()
    context = ctx.supplied_context or request_context(ctx.request, config.min_context_chars)
    result = await _answer_preview(
        lambda checker: preview_hallucination(
            config,
            ctx.answer,
            context,
            ctx.mode == "probe",
            unsupported_sentences=conditions.unsupported_sentences,
            support=conditions.support,
            checker=checker,
        ),
        ctx,
    )
    return PreviewOutcome(result, backend_calls=result.get("backend_calls", 0))


async def _answer_preview(
    run: Callable[[Checker | None], Awaitable[dict[str, Any]]], ctx: PreviewContext
) -> dict[str, Any]:
    if ctx.mode == "probe" and ctx.checker is None:
        raise unavailable(
            "no Router answers answer checks here: the detectors are not reachable", "MODEL_NOT_LOADED"
        )
    try:
        return await run(ctx.checker)
    except ValueError as exc:  # a missing answer or condition
        raise invalid_input(str(exc)) from None


# context_compression's preview is its own route, POST /api/v1/plugins/context_compression/preview
# (routes/compression.py, registered first), so the generic route never sees that type.
for _type, _fn in (
    ("response_jailbreak", response_jailbreak_preview),
    ("hallucination", hallucination_preview),
    ("system_prompt", system_prompt_preview),
    ("request_params", request_params_preview),
    ("header_mutation", header_mutation_preview),
    ("fast_response", fast_response_preview),
    ("rag", rag_preview),
    ("tools", tools_preview),
    ("tool_selection", tools_preview),
):
    register_preview(_type, _fn)

__all__ = [
    "PREVIEWS",
    "PreviewContext",
    "PreviewFn",
    "PreviewOutcome",
    "kind_of",
    "register_preview",
    "run_preview",
]
