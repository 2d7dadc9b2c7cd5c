"""deployments/activation.py and deployments/versioning.py without a Ray cluster: the
activator's stages against a fake Serve backend, the startup watcher, stable versions."""

from __future__ import annotations

from typing import Any

import pytest
from ray import serve

from app.config.loader import config_hash, parse_config
from app.management.activation import ActivationFailed
from app.management.startup import StartupTracker
from deployments import activation as act
from deployments.activation import RayActivator, StartupWatcher, load_failure
from deployments.versioning import graph_versions, stamp_versions


def document(model: str = "a") -> dict[str, Any]:
    return parse_config({
        "providers": {"defaults": {"default_model": model},
                      "models": [{"name": m, "backend_refs": [{"endpoint": "127.0.0.1:9"}]} for m in ("a", "b")]},
        "routing": {"decisions": []},
    }).config.to_document()


def digest(doc: dict[str, Any]) -> str:
    return config_hash(parse_config(doc).config)


class FakeBackend:
    """Two Router replicas that take whatever document was deployed last, after `lag` polls."""

    def __init__(self, serving: dict[str, Any], lag: int = 2) -> None:
        self.serving = serving
        self.deployed: list[dict[str, Any]] = []
        self.lag = lag
        self.polls = 0
        self.status = "RUNNING"
        self.stuck = False  # never reaches RUNNING
        self.warm_error: str | None = None  # replica 2 fails to load the next document
        self.build_error: Exception | None = None
        self.restart: str | None = None

    def build(self, graph_args: Any, doc: dict[str, Any]) -> dict[str, Any]:
        if self.build_error is not None:
            raise self.build_error
        return doc

    def deploy(self, app: dict[str, Any]) -> None:
        self.deployed.append(app)
        self.polls = 0

    def restart_required(self, graph_args: Any, old: dict[str, Any], new: dict[str, Any]) -> str | None:
        return self.restart

    def app_state(self) -> tuple[str, str, dict[str, tuple[str, int]]]:
        self.polls += 1
        status = "DEPLOYING" if self.stuck or self.polls <= self.lag else self.status
        return status, "replica crashed\ntraceback...", {"Router": ("HEALTHY", 2), "Ingress": ("HEALTHY", 1)}

    async def router_generations(self, calls: int) -> list[dict[str, Any]]:
        target = self.deployed[-1] if self.deployed else self.serving
        reports = []
        for replica in ("r1", "r2"):
            if replica == "r2" and self.warm_error and len(self.deployed) == 1:
                reports.append({"replica": replica, "hash": digest(self.serving), "error": self.warm_error,
                                "failed_hash": digest(target)})
            else:
                reports.append({"replica": replica, "hash": digest(target), "error": None, "failed_hash": None})
        return reports


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(act, "POLL_S", 0.001)


async def activate(activator: RayActivator, doc: dict[str, Any]) -> None:
    await activator.activate(parse_config(doc).config, doc)


async def test_activation_deploys_then_waits_for_running_and_every_router() -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    activator = RayActivator(object(), old, backend, timeout_s=5)
    await activate(activator, new)
    assert backend.deployed == [new] and activator.document == new
    assert set(activator.last) == {"deploy_s", "running_s", "total_s"}


async def test_a_deploy_failure_restores_the_previous_document() -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    backend.status = "DEPLOY_FAILED"
    activator = RayActivator(object(), old, backend, timeout_s=5)
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator, new)
    assert (failed.value.stage, failed.value.code) == ("activate", "deploy_failed")
    assert "traceback" not in failed.value.message  # first line only
    assert backend.deployed == [new, old] and activator.document == old


async def test_a_timeout_fails_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    backend.stuck = True
    activator = RayActivator(object(), old, backend, timeout_s=0.05)
    monkeypatch.setattr(act, "RESTORE_TIMEOUT_S", 0.05)
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator, new)
    assert (failed.value.stage, failed.value.code) == ("activate", "activation_timeout")
    assert backend.deployed == [new, old]


async def test_a_router_that_cannot_warm_the_candidate_fails_stage_warm() -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    backend.warm_error = "RuntimeError: embedding service down"
    activator = RayActivator(object(), old, backend, timeout_s=5)
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator, new)
    assert (failed.value.stage, failed.value.code) == ("warm", "warm_failed")
    assert "embedding service down" in failed.value.message
    assert backend.deployed == [new, old] and activator.document == old


async def test_graph_build_errors_are_stage_compile_and_nothing_is_deployed() -> None:
    backend = FakeBackend(document("a"))
    backend.build_error = ValueError("bad deployment option")
    with pytest.raises(ActivationFailed) as failed:
        await activate(RayActivator(object(), document("a"), backend), document("b"))
    assert (failed.value.stage, failed.value.code) == ("compile", "graph_build_failed")
    assert backend.deployed == []


async def test_declarative_apps_refuse_changes_to_deployment_arguments() -> None:
    backend = FakeBackend(document("a"))
    backend.restart = "needs a new serve deploy"
    with pytest.raises(ActivationFailed) as failed:
        await activate(RayActivator(object(), document("a"), backend), document("b"))
    assert (failed.value.stage, failed.value.code) == ("activate", "restart_required")
    assert backend.deployed == []


def test_startup_watcher_registers_deployments_and_waits_for_every_one() -> None:
    tracker = StartupTracker()
    states: dict[str, tuple[str, int]] = {"Ingress": ("HEALTHY", 1), "Router": ("UPDATING", 0),
                                          "Embedding": ("HEALTHY", 1)}
    infos = {"Embedding": {"loaded": True}}
    watcher = StartupWatcher(tracker, lambda: ("DEPLOYING", "", states), infos.get, exclude=frozenset({"Ingress"}))
    watcher.poll()
    status = tracker.status(detail=True)
    assert status.phase == "loading_model_deployments" and status.pending_models == ["Router"]
    assert {m.name for m in status.model_deployments or []} == {"Router", "Embedding"}
    states["Router"] = ("HEALTHY", 2)
    watcher.poll()
    assert tracker.status().phase == "complete" and tracker.status().ready


def test_startup_watcher_switches_to_the_cheap_health_status_once_started() -> None:
    tracker = StartupTracker()
    calls: list[str] = []
    health_states = {"Router": ("HEALTHY", 1)}

    def full() -> tuple[str, str, dict[str, tuple[str, int]]]:
        calls.append("full")
        return "RUNNING", "", {"Router": ("HEALTHY", 1)}

    def health() -> tuple[str, str, dict[str, tuple[str, int]]]:
        calls.append("health")
        return "RUNNING", "", health_states

    watcher = StartupWatcher(tracker, full, health=health)
    watcher.poll()
    assert tracker.status().ready and calls == ["full"]
    health_states["Router"] = ("UNHEALTHY", 0)
    watcher.poll()
    assert calls == ["full", "health"]
    router = next(m for m in tracker.status(detail=True).model_deployments or [] if m.name == "Router")
    assert router.state == "failed"  # reported per deployment; startup itself stays complete (a latch)


def test_startup_watcher_reports_a_model_that_did_not_load() -> None:
    tracker = StartupTracker()
    states = {"Guard": ("HEALTHY", 1), "Router": ("HEALTHY", 1)}
    info = {"Guard": {"name": "guard", "pii": {"loaded": False, "error": "spaCy model missing\ndetails"},
                      "jailbreak": {"loaded": True}}}
    StartupWatcher(tracker, lambda: ("RUNNING", "", states), info.get).poll()
    status = tracker.status(detail=True)
    assert status.phase == "error" and "spaCy model missing" in (status.reason or "")
    guard = next(m for m in status.model_deployments or [] if m.name == "Guard")
    assert guard.state == "failed" and guard.reason == "spaCy model missing"


def test_startup_watcher_deploy_failed_is_an_error() -> None:
    tracker = StartupTracker()
    StartupWatcher(tracker, lambda: ("DEPLOY_FAILED", "", {"Router": ("DEPLOY_FAILED", 0)})).poll()
    assert tracker.status().phase == "error"


def test_load_failure_reads_info_shapes() -> None:
    assert load_failure(None) is None and load_failure({"loaded": True}) is None
    assert load_failure({"loaded": False, "error": None}) == "model not loaded"


# ------------------------------------------------------------------ versions

@serve.deployment
class Leaf:
    def __init__(self, setting: dict[str, Any] | None = None) -> None:
        self.setting = setting


@serve.deployment
class Root:
    def __init__(self, leaf: Any, args: dict[str, Any]) -> None:
        self.leaf = leaf


def graph(leaf_setting: dict[str, Any], user_config: dict[str, Any]) -> Any:
    leaf = Leaf.options(user_config=user_config).bind(leaf_setting)
    return stamp_versions(Root.bind(leaf, {"config_path": "x.yaml"}))


def test_versions_are_stable_and_follow_constructor_arguments_only() -> None:
    first = graph_versions(graph({"model": "m1"}, {"config": 1}))
    assert set(first) == {"Root", "Leaf"} and all(first.values())
    assert graph_versions(graph({"model": "m1"}, {"config": 2})) == first  # user_config: reconfigure only
    changed = graph_versions(graph({"model": "m2"}, {"config": 1}))
    assert changed["Leaf"] != first["Leaf"] and changed["Root"] == first["Root"]


def test_the_serve_builder_takes_exactly_one_parameter() -> None:
    """`serve deploy` refuses builders with more parameters; activations use build_graph."""
    import inspect

    from deployments.graph import build_app, build_graph

    assert len(inspect.signature(build_app).parameters) == 1
    assert "document" in inspect.signature(build_graph).parameters
