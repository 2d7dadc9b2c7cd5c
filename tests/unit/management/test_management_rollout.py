"""The activation of a configuration on a Serve application without Ray: GraphActivator's
stages against a fake Serve backend on a fake clock, the startup watcher, the state
directory and its corrupt-file handling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.config.loader import config_hash, parse_config
from app.management.activation import ActivationFailed
from app.management.documents import candidate_of
from app.management.rollout import GraphActivator, declarative_update
from app.management.startup import StartupTracker
from app.management.startup_watch import StartupWatcher, load_failure
from app.management.state import STATE_FILE, STATE_ROOT_ENV, ConfigStore, open_store, state_dir_of


def document(model: str = "a") -> dict[str, Any]:
    return parse_config(
        {
            "providers": {
                "defaults": {"default_model": model},
                "models": [{"name": m, "backend_refs": [{"endpoint": "127.0.0.1:9"}]} for m in ("a", "b")],
            },
            "routing": {"decisions": []},
        }
    ).config.to_document()


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
                reports.append(
                    {
                        "replica": replica,
                        "hash": digest(self.serving),
                        "error": self.warm_error,
                        "failed_hash": digest(target),
                    }
                )
            else:
                reports.append(
                    {"replica": replica, "hash": digest(target), "error": None, "failed_hash": None}
                )
        return reports


class FakeTime:
    """The activator's clock: waiting between polls advances it, nothing really sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    async def pause(self, seconds: float) -> None:
        self.now += seconds


def activator_for(backend: FakeBackend, document: dict[str, Any], timeout_s: float = 5.0) -> GraphActivator:
    time = FakeTime()
    return GraphActivator(
        object(),
        document,
        backend,
        timeout_s=timeout_s,
        clock=time.clock,
        pause=time.pause,
        restore_timeout_s=1.0,
    )


async def activate(activator: GraphActivator, doc: dict[str, Any]) -> None:
    await activator.activate(parse_config(doc).config, doc)


async def test_activation_deploys_then_waits_for_running_and_every_router() -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    activator = activator_for(backend, old)
    await activate(activator, new)
    assert backend.deployed == [new] and activator.document == new
    assert set(activator.last) == {"deploy_s", "running_s", "total_s"}


async def test_a_deploy_failure_restores_the_previous_document() -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    backend.status = "DEPLOY_FAILED"
    activator = activator_for(backend, old)
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator, new)
    assert (failed.value.stage, failed.value.code) == ("activate", "deploy_failed")
    assert "traceback" not in failed.value.message  # first line only
    assert backend.deployed == [new, old] and activator.document == old


async def test_a_timeout_fails_and_restores() -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    backend.stuck = True
    activator = activator_for(backend, old, timeout_s=5.0)
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator, new)
    assert (failed.value.stage, failed.value.code) == ("activate", "activation_timeout")
    assert backend.deployed == [new, old]


async def test_a_router_that_cannot_warm_the_candidate_fails_stage_warm() -> None:
    old, new = document("a"), document("b")
    backend = FakeBackend(old)
    backend.warm_error = "RuntimeError: embedding service down"
    activator = activator_for(backend, old)
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator, new)
    assert (failed.value.stage, failed.value.code) == ("warm", "warm_failed")
    assert "embedding service down" in failed.value.message
    assert backend.deployed == [new, old] and activator.document == old


async def test_graph_build_errors_are_stage_compile_and_nothing_is_deployed() -> None:
    backend = FakeBackend(document("a"))
    backend.build_error = ValueError("bad deployment option")
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator_for(backend, document("a")), document("b"))
    assert (failed.value.stage, failed.value.code) == ("compile", "graph_build_failed")
    assert backend.deployed == []


async def test_declarative_apps_refuse_changes_to_deployment_arguments() -> None:
    backend = FakeBackend(document("a"))
    backend.restart = "needs a new serve deploy"
    with pytest.raises(ActivationFailed) as failed:
        await activate(activator_for(backend, document("a")), document("b"))
    assert (failed.value.stage, failed.value.code) == ("activate", "restart_required")
    assert backend.deployed == []


def test_startup_watcher_registers_deployments_and_waits_for_every_one() -> None:
    tracker = StartupTracker()
    states: dict[str, tuple[str, int]] = {
        "Ingress": ("HEALTHY", 1),
        "Router": ("UPDATING", 0),
        "Embedding": ("HEALTHY", 1),
    }
    infos = {"Embedding": {"loaded": True}}
    watcher = StartupWatcher(
        tracker, lambda: ("DEPLOYING", "", states), infos.get, exclude=frozenset({"Ingress"})
    )
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
    info = {
        "Guard": {
            "name": "guard",
            "pii": {"loaded": False, "error": "spaCy model missing\ndetails"},
            "jailbreak": {"loaded": True},
        }
    }
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


# ------------------------------------------------------------------ state directory


def test_state_dir_prefers_the_configured_one_then_the_environment_then_the_working_directory() -> None:
    assert state_dir_of("/srv/state", "app", {STATE_ROOT_ENV: "/root"}) == Path("/srv/state")
    assert state_dir_of(None, "app", {STATE_ROOT_ENV: "/root"}) == Path("/root/app")
    assert state_dir_of(None, "app", {}) == Path.cwd() / ".cache" / "state" / "app"


def test_a_corrupt_state_file_is_moved_aside_and_the_history_starts_fresh(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    store = open_store(tmp_path, now=lambda: 1234.0)
    assert (tmp_path / f"{STATE_FILE}.corrupt-1234").read_text() == "{not json"
    store.initialize(candidate_of(parse_config(document()).config))
    assert json.loads((tmp_path / STATE_FILE).read_text())["config_version"] == 1


def test_a_readable_state_file_is_kept(tmp_path: Path) -> None:
    first = ConfigStore(tmp_path)
    first.initialize(candidate_of(parse_config(document()).config))
    store = open_store(tmp_path)
    store.initialize(candidate_of(parse_config(document()).config))
    assert store.active is not None and store.active.config_version == 1
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_a_declarative_update_overrides_only_this_apps_user_configs() -> None:
    details = {
        "proxy_location": "EveryNode",
        "http_options": {"host": "127.0.0.1", "port": 8080},
        "grpc_options": None,
        "applications": {
            "svc-sr": {
                "deployed_app_config": {
                    "name": "svc-sr",
                    "import_path": "deployments.graph:build_app",
                    "deployments": [{"name": "Router", "num_replicas": 2}],
                }
            },
            "other": {"deployed_app_config": {"name": "other", "import_path": "x:y"}},
            "imperative": {"deployed_app_config": None},
        },
    }
    schema = declarative_update(
        details, "svc-sr", {"Router": {"config": {"v": 2}}, "Ingress": {"config": {"v": 2}}}
    )
    apps = {app["name"]: app for app in schema["applications"]}
    assert set(apps) == {"svc-sr", "other"}  # an imperatively deployed app is not part of the config
    assert apps["svc-sr"]["deployments"] == [
        {"name": "Router", "num_replicas": 2, "user_config": {"config": {"v": 2}}},  # its own options kept
        {"name": "Ingress", "user_config": {"config": {"v": 2}}},
    ]
    assert apps["other"] == {"name": "other", "import_path": "x:y"}
    assert schema["proxy_location"] == "EveryNode" and schema["http_options"]["port"] == 8080
    assert "grpc_options" not in schema
    assert details["applications"]["svc-sr"]["deployed_app_config"]["deployments"] == [
        {"name": "Router", "num_replicas": 2}
    ]  # the controller's view is not modified


def test_a_deployment_started_on_demand_is_ready_without_a_replica_and_not_woken() -> None:
    """`svc-sr serve` scales the deployments a local request never calls to zero
    (deployments/serve_env.py): startup completes without them, and no info() call starts one."""
    from deployments.activation import scales_to_zero

    tracker = StartupTracker()
    asked: list[str] = []
    states = {"Router": ("HEALTHY", 1), "Embedding": ("HEALTHY", 0), "Guard": ("HEALTHY", 0)}
    options = {"Embedding": {"autoscaling_config": {"min_replicas": 0}}, "Guard": {"num_replicas": 1}}
    on_demand = scales_to_zero(options)
    assert on_demand == {"Embedding"}

    def info(name: str) -> dict[str, Any]:
        asked.append(name)
        return {"loaded": True}

    watcher = StartupWatcher(tracker, lambda: ("RUNNING", "", states), info, on_demand=on_demand)
    watcher.poll()
    assert tracker.status().pending_models == ["Guard"]  # a Guard with no replica still loads
    assert asked == []
    states["Guard"] = ("HEALTHY", 1)
    watcher.poll()
    assert tracker.status().phase == "complete" and asked == ["Guard"]
    states["Embedding"] = ("HEALTHY", 1)  # as the cheap health status reports any ready deployment
    watcher.poll()
    assert asked == ["Guard"]
