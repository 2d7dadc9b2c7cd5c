"""Pins every private or unstable Ray API deployments/ray_compat.py relies on, without starting Ray.

Each test fails, with the name of what moved, when a Ray upgrade renames or reshapes one of them.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, replace
from typing import Any, cast

import pytest
from ray import serve
from ray.exceptions import ActorUnavailableError, RayTaskError
from ray.serve.exceptions import BackPressureError

from deployments import ray_compat


class Unreachable(Exception):
    pass


class Overloaded(Exception):
    pass


@serve.deployment(user_config={"k": 1})
class Bound:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def bound_app() -> Any:
    # Binding builds the graph node in this process; nothing talks to a cluster.
    return cast(Any, Bound).bind(1, extra=2)


class FailingHandle:
    """A handle whose `method.remote()` raises `error` when awaited."""

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def __getattr__(self, method: str) -> Any:
        error = self._error

        class Method:
            async def remote(self, *args: Any) -> Any:
                raise error

        return Method()


def test_replica_error_unwraps_ray_task_error_to_the_cause() -> None:
    cause = ValueError("from the replica")
    wrapped = RayTaskError("method", "traceback", cause).as_instanceof_cause()
    assert isinstance(wrapped, RayTaskError) and isinstance(wrapped, ValueError)
    assert ray_compat.replica_error(wrapped) is cause
    assert ray_compat.replica_error(wrapped, keep=lambda exc: isinstance(exc, KeyError)) is wrapped
    plain = RuntimeError("not Ray's")
    assert ray_compat.replica_error(plain) is plain


async def test_call_raises_the_replicas_own_error() -> None:
    cause = KeyError("model")
    handle = FailingHandle(RayTaskError("lookup", "traceback", cause).as_instanceof_cause())
    with pytest.raises(KeyError) as raised:
        await ray_compat.call(handle, "lookup")
    assert raised.value is cause


async def test_call_maps_backpressure_and_unavailable_to_the_callers_errors() -> None:
    options = {"unavailable": Unreachable, "overloaded": Overloaded}
    with pytest.raises(Overloaded):
        await ray_compat.call(
            FailingHandle(BackPressureError(num_queued_requests=3, max_queued_requests=2)),
            "lookup",
            **options,
        )
    with pytest.raises(Unreachable):
        await ray_compat.call(FailingHandle(ActorUnavailableError("restarting", None)), "lookup", **options)
    with pytest.raises(ActorUnavailableError):  # left as Ray's when no mapping is given
        await ray_compat.call(FailingHandle(ActorUnavailableError("restarting", None)), "lookup")


class DiesOnce:
    """A handle whose first call finds its replica dead (its node went) and whose next one,
    routed elsewhere by Serve, answers."""

    def __init__(self, deaths: int = 1) -> None:
        self.calls = 0
        self.deaths = deaths

    def __getattr__(self, method: str) -> Any:
        outer = self

        class Method:
            async def remote(self, *args: Any) -> Any:
                outer.calls += 1
                if outer.calls <= outer.deaths:
                    raise ActorUnavailableError("the node died", None)
                return ("answer", args)

        return Method()


async def test_call_sends_a_side_effect_free_call_again_when_its_replica_died() -> None:
    handle = DiesOnce()
    assert await ray_compat.call(handle, "route", 1, retries=1) == ("answer", (1,))
    assert handle.calls == 2
    with pytest.raises(Unreachable):  # retries spent: the caller's mapping as before
        await ray_compat.call(DiesOnce(deaths=2), "route", retries=1, unavailable=Unreachable)
    with pytest.raises(ActorUnavailableError):  # no retries asked for: not sent again
        await ray_compat.call(DiesOnce(), "route")


class BusyOnce:
    """A handle whose first call meets a busy deployment (`busy`: a full queue, or a replica's
    own 429) and whose next one, scheduled by Serve onto a less busy replica, answers."""

    def __init__(self, busy: BaseException) -> None:
        self.calls = 0
        self.busy = busy

    def __getattr__(self, method: str) -> Any:
        outer = self

        class Method:
            async def remote(self, *args: Any) -> Any:
                outer.calls += 1
                if outer.calls == 1:
                    raise outer.busy
                return "answer"

        return Method()


class ReplicaOverloaded(Exception):
    status = 429


@pytest.mark.parametrize(
    "busy",
    [
        BackPressureError(num_queued_requests=3, max_queued_requests=2),
        RayTaskError("decide", "traceback", ReplicaOverloaded("queue full")).as_instanceof_cause(),
    ],
)
async def test_a_busy_deployment_is_tried_again_before_its_429_is_passed_back(busy: BaseException) -> None:
    handle = BusyOnce(busy)
    assert await ray_compat.call(handle, "decide", retries=1, overloaded=Overloaded) == "answer"
    assert handle.calls == 2
    with pytest.raises((Overloaded, ReplicaOverloaded)):  # no retries asked for: passed back at once
        await ray_compat.call(BusyOnce(busy), "decide", overloaded=Overloaded)


def test_process_transport_follows_this_processes_serve_mode() -> None:
    from ray.serve._private.constants import RAY_SERVE_USE_GRPC_BY_DEFAULT
    from ray.serve._private.handle_options import DynamicHandleOptions
    from ray.serve.handle import DeploymentHandle

    assert isinstance(RAY_SERVE_USE_GRPC_BY_DEFAULT, bool)
    assert "_by_reference" in inspect.signature(DeploymentHandle.options).parameters
    assert "_by_reference" in {field.name for field in dataclasses.fields(DynamicHandleOptions)}
    # A real handle's `.options()` connects to Serve, so the transport switch runs on a stand-in.

    @dataclass(frozen=True)
    class Options:
        _by_reference: bool

    @dataclass(frozen=True)
    class Handle:  # the two members of DeploymentHandle it uses
        handle_options: Options

        def options(self, _by_reference: bool) -> Handle:
            return replace(self, handle_options=Options(_by_reference))

    wanted = not RAY_SERVE_USE_GRPC_BY_DEFAULT
    assert ray_compat.process_transport(Handle(Options(not wanted))).handle_options._by_reference is wanted
    same = Handle(Options(wanted))
    assert ray_compat.process_transport(same) is same and ray_compat.process_transport(None) is None


def test_replica_user_config_reads_the_replica_contexts_deployment_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ray.serve.context import ReplicaContext

    assert "_deployment_config" in {field.name for field in dataclasses.fields(ReplicaContext)}

    @dataclass
    class Config:
        user_config: Any

    @dataclass
    class Context:
        _deployment_config: Config

    monkeypatch.setattr(serve, "get_replica_context", lambda: Context(Config({"config": {"a": 1}})))
    assert ray_compat.replica_user_config() == {"config": {"a": 1}}
    monkeypatch.setattr(serve, "get_replica_context", lambda: Context(Config(None)))
    assert ray_compat.replica_user_config() is None


def test_bound_deployment_exposes_name_class_arguments_and_user_config() -> None:
    app = bound_app()
    assert hasattr(app, "_bound_deployment")
    bound = ray_compat.bound_deployment(app)
    assert bound.name == "Bound" and bound.func_or_class is cast(Any, Bound).func_or_class
    assert tuple(bound.init_args) == (1,) and dict(bound.init_kwargs) == {"extra": 2}
    assert bound.user_config == {"k": 1}


def test_set_code_version_is_reflected_by_the_deployments_version() -> None:
    app = bound_app()
    assert ray_compat.bound_deployment(app).version is None
    ray_compat.set_code_version(app, "abc-123")
    assert ray_compat.bound_deployment(app)._version == "abc-123"
    assert ray_compat.bound_deployment(app).version == "abc-123"


class FakeClient:
    def __init__(self) -> None:
        self.deployed: list[Any] = []

    def get_serve_details(self) -> dict[str, Any]:
        return {"applications": {"svc-sr": {"status": "RUNNING"}}}

    def get_serve_status(self, name: str) -> str:
        return f"status of {name}"

    def deploy_apps(self, config: Any) -> None:
        self.deployed.append(config)


def test_serve_client_comes_from_the_global_client(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.serve.context

    client = FakeClient()
    monkeypatch.setattr(ray.serve.context, "_get_global_client", lambda: client)  # raises if renamed
    assert ray_compat.serve_client() is client


def test_controller_client_has_the_methods_ray_compat_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.serve.context
    from ray.serve._private.client import ServeControllerClient

    for method in ("get_serve_details", "get_serve_status", "deploy_apps"):
        assert callable(getattr(ServeControllerClient, method)), method
    inspect.signature(ServeControllerClient.get_serve_status).bind(None, "svc-sr")  # takes the app name

    client = FakeClient()
    monkeypatch.setattr(ray.serve.context, "_get_global_client", lambda: client)
    assert ray_compat.serve_details() == {"applications": {"svc-sr": {"status": "RUNNING"}}}
    assert ray_compat.status_overview("svc-sr") == "status of svc-sr"


def test_deploy_declarative_validates_a_serve_deploy_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.serve.context
    from ray.serve.schema import ServeDeploySchema

    client = FakeClient()
    monkeypatch.setattr(ray.serve.context, "_get_global_client", lambda: client)
    ray_compat.deploy_declarative(
        {
            "applications": [
                {
                    "name": "svc-sr",
                    "import_path": "deployments.graph:build_app",
                    "args": {"config_path": "configs/config.yaml"},
                }
            ]
        }
    )
    (schema,) = client.deployed
    assert isinstance(schema, ServeDeploySchema)
    assert schema.applications[0].name == "svc-sr"
    assert schema.applications[0].args == {"config_path": "configs/config.yaml"}


def test_redeploy_runs_the_application_without_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray.serve.api

    parameters = inspect.signature(ray.serve.api._run).parameters
    assert {"_blocking", "name", "route_prefix"} <= set(parameters)
    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(ray.serve.api, "_run", lambda app, **kwargs: calls.append((app, kwargs)))
    app = bound_app()
    ray_compat.redeploy(app, "svc-sr", None)
    assert calls == [(app, {"name": "svc-sr", "route_prefix": None, "_blocking": False})]


async def test_wait_assigned_awaits_the_responses_replica_future_and_cancels_on_timeout() -> None:
    import asyncio

    from ray.serve.handle import DeploymentResponseGenerator

    assert hasattr(DeploymentResponseGenerator, "_fetch_future_result_async")
    assert hasattr(DeploymentResponseGenerator, "cancel")

    class Pending:
        def __init__(self, assigned: asyncio.Event) -> None:
            self.assigned, self.cancelled = assigned, False

        async def _fetch_future_result_async(self) -> None:
            await self.assigned.wait()

        def cancel(self) -> None:
            self.cancelled = True

    never = Pending(asyncio.Event())
    assert await ray_compat.wait_assigned(never, 0.05) is False and never.cancelled
    ready = asyncio.Event()
    ready.set()
    soon = Pending(ready)
    assert await ray_compat.wait_assigned(soon, 1.0) is True and not soon.cancelled


def test_without_monitors_gives_ray_init_a_head_without_the_two_monitors() -> None:
    """Inside, the RayParams ray.init builds (looked up on the module at each call) asks for no
    autoscaler monitor and no log monitor, the two switches the head node reads; outside, Ray's
    own defaults again."""
    from ray._private import node, parameter, worker

    assert "ray._private.parameter.RayParams(" in inspect.getsource(worker.init)
    head = inspect.getsource(node.Node)
    assert "self._ray_params.no_monitor" in head and "self._ray_params.include_log_monitor" in head
    original = parameter.RayParams
    with ray_compat.without_monitors():
        params = parameter.RayParams(num_cpus=2)
        assert params.no_monitor is True and params.include_log_monitor is False
        assert params.num_cpus == 2
    assert parameter.RayParams is original
    default = parameter.RayParams()
    assert default.no_monitor is False and default.include_log_monitor is None
