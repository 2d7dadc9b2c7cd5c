"""The Ingress's and the ext_proc sidecar's views of other deployments, over their handles.

Each adapts a DeploymentHandle to a Ray-free protocol of app/ (the exchange's RouterClient,
the management API's ReplaySource and CacheControl, the StorageClient's transport), unwrapping Ray's
errors through deployments/ray_compat.py so a replica's own error reaches the caller as itself.
"""

from __future__ import annotations

from typing import Any

from ray.serve.handle import DeploymentHandle

from app.cache.base import CacheScope, CacheUnavailable, FlushOutcome
from app.common.background import BackgroundTasks
from app.common.errors import SvcError
from app.config.global_config import ResponseCacheConfig
from app.keys.grant import ModelGrant
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict
from app.pipeline.completion import CompletionServices, complete_request
from app.pipeline.direct_route import DirectRouter
from app.pipeline.metrics import RouterMetrics
from app.pipeline.plan import Accounting, CompletionReport, ProviderState, RoutePlan
from app.replays.replays import ReplayAggregate, ReplayPage
from app.storage.client import StorageClient, StorageReply
from app.storage.files import FileServiceDown
from deployments import ray_compat
from deployments.cache_lane import cache_lane
from deployments.observability import replay_sender


class HandleRouterClient:
    """Adapts the Router DeploymentHandle to the front door's RouterClient protocol: route()
    on a Router replica, complete() here (app/pipeline/completion.py). One Ray hop per request
    fewer, and the answer body is not shipped to a Router replica (on 2 cores, leaving out
    completion altogether cut the c=1 p50 by 2.3 ms; that work used to compete with the next
    request, docs/performance.md). With `direct`, an explicit model's plan is made here too
    (app/pipeline/direct_route.py) and only auto requests take the hop."""

    def __init__(
        self, handle: DeploymentHandle, completion: CompletionServices, direct: DirectRouter | None = None
    ) -> None:
        self._handle = handle
        self._completion = completion
        self._direct = direct

    async def route(
        self,
        body: dict[str, Any],
        headers: dict[str, str],
        request_id: str,
        grant: ModelGrant | None = None,
        tie: ProviderState | None = None,
    ) -> RoutePlan:
        if self._direct is not None:  # an explicit model is routed here, without the hop
            direct = self._direct.route(body, headers, request_id, grant, tie)
            if direct is not None:
                return direct
        # route() changes nothing: a Router replica lost with its node is asked again elsewhere.
        plan: RoutePlan = await ray_compat.call(
            self._handle, "route", body, headers, request_id, grant, tie, keep=_is_svc_error, retries=1
        )
        return plan

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting:
        return await complete_request(self._completion, plan, report)

    async def check_answer(self, checks: AnswerChecks, answer: str, context: list[str]) -> AnswerVerdict:
        """The response-side plugins on a Router replica (its evaluators and encoder); they change
        nothing, so a replica lost under the call is asked again elsewhere, as route() is."""
        verdict: AnswerVerdict = await ray_compat.call(
            self._handle, "check_answer", checks, answer, context, retries=1
        )
        return verdict

    async def preview(self, request: Any, headers: Any = None, seed: int | None = None) -> dict[str, Any]:
        """The management API's routing preview (RoutingPreviewer) on a Router replica."""
        preview: dict[str, Any] = await ray_compat.call(
            self._handle, "preview", dict(request), dict(headers or {}), seed, keep=_is_svc_error
        )
        return preview


def front_door_completion(
    cache: DeploymentHandle | None,
    observability: DeploymentHandle | None,
    metrics: RouterMetrics,
    tasks: BackgroundTasks,
) -> CompletionServices:
    """Completion at a front door: cache writes over the ResponseCache's lane, replay records
    to Observability, completion metrics into the front door's own recorder (pushed and summed
    with every other replica's)."""
    return CompletionServices(
        metrics=metrics,
        cache_store=cache_lane(cache).store if cache is not None else None,
        record_replay=replay_sender(observability, tasks) if observability is not None else None,
    )


def _is_svc_error(exc: BaseException) -> bool:
    """A routing error raised in the Router replica reaches the client as itself (its
    status and error body), not as an opaque Ray task failure."""
    return isinstance(exc, SvcError)


class ObservabilityReplays:
    """ReplaySource over the Observability deployment (shared by every Router replica)."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def list(
        self, limit: int = 100, after_sequence: int = 0, decision: str | None = None, model: str | None = None
    ) -> ReplayPage:
        page = await self._handle.list_replays.remote(limit, after_sequence, decision, model)
        return ReplayPage.model_validate(page)

    async def get(self, replay_id: str) -> dict[str, Any] | None:
        record: dict[str, Any] | None = await self._handle.get_replay.remote(replay_id)
        return record

    async def aggregate(self, decision: str | None = None, model: str | None = None) -> ReplayAggregate:
        return ReplayAggregate.model_validate(await self._handle.aggregate_replays.remote(decision, model))


class HandleCacheControl:
    """The storage API's CacheControl (app/cache/admin.py) over the ResponseCache
    deployment: its store's outage (CacheUnavailable) and an unreachable or overloaded
    deployment both reach the admin as CacheUnavailable (a 503)."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self._handle = handle

    async def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = await self._call("stats")
        return stats

    async def count(self, scope: CacheScope | None = None) -> int:
        return int(await self._call("count", _plain(scope)))

    async def clear(self, scope: CacheScope | None = None) -> int:
        return int(await self._call("clear", None, _plain(scope)))

    async def flush(self, scope: CacheScope | None = None) -> FlushOutcome:
        return FlushOutcome.model_validate(await self._call("flush", _plain(scope)))

    async def probe(self, settings: ResponseCacheConfig) -> None:
        # Any error of the probe is the candidate's (the admin reports it): raised as itself.
        await self._call("probe", settings.model_dump(mode="json"), keep=Exception)

    async def _call(self, method: str, *args: Any, keep: type[Exception] = CacheUnavailable) -> Any:
        def unavailable(exc: BaseException) -> BaseException:
            return CacheUnavailable(f"ResponseCache {method}: deployment unavailable ({type(exc).__name__})")

        return await ray_compat.call(
            self._handle,
            method,
            *args,
            keep=lambda exc: isinstance(exc, keep),
            unavailable=unavailable,
            overloaded=unavailable,
        )


def _plain(scope: CacheScope | None) -> dict[str, Any] | None:
    """A scope as the ResponseCache deployment takes it over the handle."""
    return None if scope is None else scope.model_dump()


def storage_client(handle: DeploymentHandle) -> StorageClient:
    """The storage routes' and the rag plugin's StorageClient over the Storage deployment
    (deployments/storage.py): each operation is the method of its name, its reply carries the
    storage errors as data; a deployment without a live replica, or a full queue, is the
    service down (FileServiceDown: 503 on the routes, `unavailable` to the rag plugin)."""

    def down(exc: BaseException) -> BaseException:
        return FileServiceDown(f"Storage deployment unavailable ({type(exc).__name__})")

    async def send(op: str, args: tuple[Any, ...]) -> StorageReply:
        reply: StorageReply = await ray_compat.call(handle, op, *args, unavailable=down, overloaded=down)
        return reply

    return StorageClient(send)
