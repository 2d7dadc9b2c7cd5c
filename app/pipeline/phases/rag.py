"""Phase `rag`: the decision's `rag` plugin (app/pipeline/rag.py) before the request goes out.
Runs after the request mutations, like memory recall; a store that is down answers 503 only
with `on_error: fail`, otherwise the request goes on without passages and says so."""

from __future__ import annotations

from app.common.errors import SvcError
from app.config.plugins import RagPlugin
from app.pipeline.plan import ImmediateResponse, RoutePlan
from app.pipeline.rag import CHUNKS_HEADER, STATUS_HEADER, RagUnavailable, run_rag
from app.pipeline.services import PipelineServices


async def rag_step(services: PipelineServices, plan: RoutePlan, policy: RagPlugin | None) -> None:
    if policy is None:
        return
    try:
        usage = await run_rag(services.retrieve, services.rag_cache, policy, plan.body)
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
