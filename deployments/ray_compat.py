"""Every use of a private or unstable Ray API, and the one way to unwrap Ray's errors.

Ray 2.60 offers no public API for several things svc-sr needs (redeploying its own application
without blocking, the controller's status overview, a replica's user_config before
`reconfigure()`, a handle's transport, a deployment's version, the local node's processes).
They live here, each pinned by tests/unit/deployments/test_ray_compat.py, so a Ray upgrade
that moves one fails there, with its name, instead of somewhere in a request.

Error unwrapping: an exception raised inside a replica reaches the caller wrapped in a
`RayTaskError`; `replica_error()` gives back the replica's own exception (a routing error
with its status and body, a model's ModelNotLoadedError), and `call()` maps an unreachable
or overloaded deployment to the caller's own errors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.serve import Application
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

H = TypeVar("H")

# A deployment that cannot take the call: no replica, replica died or is restarting.
UNAVAILABLE_ERRORS = (RayActorError, ActorUnavailableError, DeploymentUnavailableError)
OVERLOADED_ERRORS: tuple[type[BaseException], ...] = (BackPressureError,)


def replica_error(exc: BaseException, keep: Callable[[BaseException], bool] | None = None) -> BaseException:
    """The replica's own exception inside a RayTaskError (when `keep` accepts it), else `exc`."""
    if not isinstance(exc, RayTaskError):
        return exc
    cause = getattr(exc, "cause", None)
    if isinstance(cause, Exception) and (keep is None or keep(cause)):
        return cause
    return exc


async def call(
    handle: Any,
    method: str,
    *args: Any,
    keep: Callable[[BaseException], bool] | None = None,
    unavailable: Callable[[BaseException], BaseException] | None = None,
    overloaded: Callable[[BaseException], BaseException] | None = None,
    retries: int = 0,
) -> Any:
    """`await handle.<method>.remote(*args)` with Ray's errors unwrapped: the replica's own
    exception is raised as itself (when `keep` accepts it); an unreachable deployment raises
    `unavailable(exc)`, a full queue `overloaded(exc)` (each left as Ray's when not given).
    `retries`: side-effect-free calls sent again when their replica died, or was busy (a full
    queue, or its own 429 `overloaded`): Serve's scheduler then prefers a less busy replica."""
    for attempt in range(retries + 1):
        again = attempt < retries
        try:
            return await getattr(handle, method).remote(*args)
        except RayTaskError as exc:
            error = replica_error(exc, keep)
            if not again or getattr(error, "status", None) != 429:
                raise error from None
        except OVERLOADED_ERRORS as exc:
            if not again:
                raise (exc if overloaded is None else overloaded(exc)) from None
        except UNAVAILABLE_ERRORS as exc:
            if not again:
                raise (exc if unavailable is None else unavailable(exc)) from None
    raise AssertionError("unreachable: the last attempt returns or raises")


def process_transport(handle: H) -> H:
    """`handle` with the transport this process's Serve runs with: gRPC in throughput-optimized
    mode (~1.1 ms a hop here), else Ray actor calls (~2.4 ms). A handle arrives pickled with the
    transport fixed when the process that built the graph imported Serve, maybe without the
    fast-path environment (a test driver, a laptop's `serve run`). Replicas call this on the
    handles they use per request. Private: `RAY_SERVE_USE_GRPC_BY_DEFAULT`, `_by_reference`."""
    if handle is None:
        return handle
    from ray.serve._private.constants import RAY_SERVE_USE_GRPC_BY_DEFAULT

    by_reference = not RAY_SERVE_USE_GRPC_BY_DEFAULT
    current: Any = handle
    if current.handle_options._by_reference == by_reference:
        return handle
    return cast(H, current.options(_by_reference=by_reference))


async def wait_assigned(response: Any, timeout_s: float) -> bool:
    """Wait until Serve has given a handle call to a replica; False when `timeout_s` passed first
    (the call is then cancelled: it never reached a replica). A deployment whose only replica is
    restarting queues calls until a new one is up, minutes for an LLM engine; a caller with
    somewhere else to go asks this first. Private: `_fetch_future_result_async`."""
    import asyncio

    try:
        await asyncio.wait_for(asyncio.shield(response._fetch_future_result_async()), timeout_s)
    except TimeoutError:
        response.cancel()
        return False
    return True


def replica_user_config() -> dict[str, Any] | None:
    """This replica's user_config, readable in the constructor (Serve calls `reconfigure()`
    only after an ingress's ASGI app is built). Private: `ReplicaContext._deployment_config`."""
    from ray import serve

    config = getattr(serve.get_replica_context(), "_deployment_config", None)
    user_config = getattr(config, "user_config", None)
    return user_config if isinstance(user_config, dict) else None


def bound_deployment(app: Application) -> Any:
    """The deployment an application node binds (its name, class, arguments, user_config).
    Private: `Application._bound_deployment`."""
    return app._bound_deployment


def set_code_version(app: Application, version: str) -> None:
    """Give a graph node a fixed code version (a redeploy keeps replicas whose version did not
    change). Private: `Deployment._version`."""
    app._bound_deployment._version = version


def serve_client() -> Any:
    """The driver's Serve controller client. Private: `ray.serve.context._get_global_client`."""
    from ray.serve.context import _get_global_client

    return _get_global_client()


def serve_controller() -> Any:
    """The Serve controller actor. Private: `ServeControllerClient._controller`."""
    return serve_client()._controller


def serve_namespace() -> str:
    """The Ray namespace of Serve's named actors. Private: `SERVE_NAMESPACE`."""
    from ray.serve._private.constants import SERVE_NAMESPACE

    return str(SERVE_NAMESPACE)


def serve_details() -> dict[str, Any]:
    """The controller's full view of every application (what `serve status -v` prints)."""
    details = serve_client().get_serve_details()
    return details if isinstance(details, dict) else {}


def status_overview(app_name: str) -> Any:
    """The controller's small status protobuf of one application (cheap to poll)."""
    return serve_client().get_serve_status(app_name)


def deploy_declarative(schema: dict[str, Any]) -> None:
    """Apply a whole declarative Serve config (what `serve deploy` sends)."""
    from ray.serve.schema import ServeDeploySchema

    serve_client().deploy_apps(ServeDeploySchema.model_validate(schema))


def redeploy(app: Application, name: str, route_prefix: str | None) -> None:
    """Hand a new target for application `name` to the controller without waiting for it
    (call from a worker thread). Private: `ray.serve.api._run(..., _blocking=False)`."""
    from ray.serve.api import _run

    _run(app, name=name, route_prefix=route_prefix, _blocking=False)


@contextmanager
def without_monitors() -> Iterator[None]:
    """A local `ray.init` inside starts no autoscaler monitor (one machine has no autoscaler) nor
    log monitor (it feeds only `log_to_driver`), as `ray start --no-monitor
    --include-log-monitor=false` would. Private: `RayParams`."""
    from ray._private import parameter

    module, original = cast(Any, parameter), parameter.RayParams
    off: dict[str, Any] = {"no_monitor": True, "include_log_monitor": False}  # Ray types the latter str
    module.RayParams = functools.partial(original, **off)
    try:
        yield
    finally:
        module.RayParams = original


def shutdown_local_ray() -> None:
    """`ray.shutdown()` without its 1 s wait on an autoscaler monitor, which ignores SIGTERM (0.4 s,
    not 1.5 s); a local monitor holds no state, so it is killed first. Private: `all_processes`."""
    import ray
    from ray._private import ray_constants, worker

    node = worker._global_node
    if node is not None and node.head:
        for info in node.all_processes.get(ray_constants.PROCESS_TYPE_MONITOR, []):
            info.process.kill()
            info.process.wait(timeout=1)
    ray.shutdown()
