"""Phase `rag`: the decision's `rag` plugin (app/pipeline/rag.py) before the request goes out.
Runs after the request mutations, like memory recall; a store that is down answers 503 only
with `on_error: fail`, otherwise the request goes on without passages and says so.
Knowledge bases are searched over the replica's kb feed (`PipelineServices.knowledge_bases`,
the one the kb signal reads) with the request's shared query vector (app/pipeline/rag_kb.py)."""

from __future__ import annotations

import numpy as np

from app.common.errors import SvcError
from app.config.plugins import RagPlugin
from app.pipeline.plan import ImmediateResponse, RoutePlan
from app.pipeline.rag import CHUNKS_HEADER, STATUS_HEADER, RagUnavailable, run_rag
from app.pipeline.rag_kb import KbRetriever, QueryVector
from app.pipeline.services import PipelineServices
from app.pipeline.signals.base import SignalContext


def query_vectors(services: PipelineServices, ctx: SignalContext | None) -> QueryVector | None:
    """The rag query's vector: the request's shared one when the query is the text the signals
    embedded (the usual case: the human's ask), else one encoder call."""
    embed = services.embed
    if embed is None:
        return None

    async def vector(query: str) -> np.ndarray:
        if ctx is not None and ctx.text.strip() == query:
            return await ctx.query_vector()
        return np.asarray(await embed([query]), dtype=np.float32).reshape(-1)

    return vector


async def rag_step(
    services: PipelineServices, plan: RoutePlan, policy: RagPlugin | None, ctx: SignalContext | None = None
) -> None:
    if policy is None:
        return
    kbs = KbRetriever(services.knowledge_bases, query_vectors(services, ctx)) if policy.kb_names else None
    try:
        usage = await run_rag(services.retrieve, services.rag_cache, policy, plan.body, kbs)
    except RagUnavailable as exc:  # on_error: fail
        error = SvcError(
            503,
            f"rag retrieval failed and the decision's rag plugin has on_error: fail ({exc})",
            "service_unavailable_error",
            "rag_unavailable",
        )
        plan.selected_model = None
        plan.reason_code = "rag_unavailable"  # the error metric's reason, not a security block's
        headers = {STATUS_HEADER: "unavailable", "retry-after": "1"}
        plan.immediate = ImmediateResponse(kind="block", status=503, body=error.body(), headers=headers)
        plan.response_headers.update(headers)
        return
    plan.rag = usage.model_dump()
    plan.response_headers[CHUNKS_HEADER] = str(len(usage.chunks))
    plan.response_headers[STATUS_HEADER] = "cached" if usage.cached else usage.status
