"""Router-managed runtimes behind the router's front door, with real `svc-srun run` workers on
Unix sockets (no Ray): the config's `decision_model` deployment answers POST /v1/decisions of
create_app through ManagedRuntimes; a worker killed mid-traffic is restarted while the router
keeps answering. Also the DecisionModel Ray deployment (local testing mode) hosting a managed
runtime, and a worker that outlives its router stopping itself."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.api.app import StaticConfigView, create_app
from app.common.supervisor import RestartPolicy
from app.config.loader import parse_config
from app.srun.hosting import ManagedRuntimes, runtime_settings
from app.srun.settings import SrunEnvironment
from app.upstream.client import UpstreamClient
from tests.srun.workers import ROOT

pytestmark = pytest.mark.integration
SRUN = [sys.executable, "-m", "app.cli.srun"]
SUPPORT = {
    "type": "choice",
    "criteria": {
        "billing": "Invoices, charges, refunds or payment methods",
        "shipping": "Delivery status, tracking or the shipping address of an order",
    },
}
CONFIG = {
    "version": "v0.3",
    "providers": {"models": [{"name": "m", "backend_refs": [{"endpoint": "127.0.0.1:9"}]}]},
    "model_deployments": {
        "dm": {
            "provider": "model_runtime",
            "artifact": "decision-model",
            "input": {"overflow": "window", "max_tokens": 4096},
        }
    },
    "decision_model": {"deployment": "dm"},
}


def ask(state: str, **extra: object) -> dict[str, object]:
    return {"state": state, "questions": {"team": SUPPORT}, **extra}


async def test_the_front_door_answers_through_a_managed_worker_across_a_restart(tmp_path):
    config = parse_config(CONFIG).config
    env = SrunEnvironment(command=SRUN, dir=tmp_path, cpu_threads=1)
    runtimes = ManagedRuntimes.from_config(
        config, env=env, policy=RestartPolicy(min_backoff_s=0.2, stop_timeout_s=5.0)
    )
    app = create_app(
        None,
        UpstreamClient(),
        StaticConfigView(config),  # type: ignore[arg-type]
        decisions=runtimes.decision_source(),
    )
    metrics = runtimes.metrics
    try:
        assert await runtimes.start(timeout_s=90)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://router", timeout=60
        ) as router:
            first = await router.post("/v1/decisions", json=ask("I was charged twice, refund one payment"))
            assert first.status_code == 200, first.text
            assert first.json()["answers"]["team"]["choice"] == "billing"
            assert first.json()["model"] == "decision-model"
            same = await router.post("/v1/systemone", json=ask("where is my parcel?", model="dm"))
            assert same.json()["answers"]["team"]["choice"] == "shipping"
            cards = (await router.get("/v1/systemone/models")).json()["data"]
            assert [c["name"] for c in cards] == ["decision-model"]
            missing = await router.post("/v1/decisions", json=ask("x", model="no-such-model"))
            assert missing.status_code == 404
            assert missing.json() == {"error": {"code": "model_not_found", "message": "model not found"}}
            invalid = await router.post(
                "/v1/decisions", json={"state": "x", "questions": {"q": {"type": "set"}}}
            )
            assert invalid.status_code == 400 and invalid.json()["error"]["code"] == "invalid_request"

            process = runtimes.supervisor.replicas["dm"][0].process
            assert process is not None and process.process is not None
            os.kill(process.process.pid, signal.SIGKILL)
            # Concurrent requests during the restart: each rides over it (retries until its deadline).
            during = await asyncio.gather(
                *(
                    router.post("/v1/decisions", json=ask(f"refund my double charge, try {i}"))
                    for i in range(4)
                )
            )
            assert [r.status_code for r in during] == [200] * 4
            assert all(r.json()["answers"]["team"]["choice"] == "billing" for r in during)
            after = await router.post("/v1/decisions", json=ask("my order was never delivered"))
            assert after.json()["answers"]["team"]["choice"] == "shipping"
        assert process.restarts >= 1
        await runtimes.supervisor.check_health()
        assert metrics.value("svc_model_runtime_restarts_total", deployment="dm") >= 1
        assert metrics.value("svc_model_runtime_requests_total", deployment="dm", outcome="ok") >= 7
        assert metrics.value("svc_model_runtime_requests_total", deployment="dm", outcome="rejected") == 2
        assert metrics.value("svc_model_runtime_ready", deployment="dm") == 1.0
        # The same values are in the recorder the router's metrics endpoint sums.
        recorder = metrics.recorder
        assert recorder.value("svc_model_runtime_restarts_total", deployment="dm") >= 1
        assert recorder.value("svc_model_runtime_replica_ready", deployment="dm", replica="0") == 1.0
        phases = recorder.snapshot("t").histograms["svc_model_runtime_server_seconds"]
        assert any('"forward"' in key for key in phases)
    finally:
        await runtimes.stop()
    assert not process.alive()


def test_the_decision_model_deployment_hosts_a_managed_runtime(tmp_path, monkeypatch):
    from ray import serve

    from app.srun.client import RuntimeCallError
    from deployments.decision_model import DecisionModel
    from tests.integration.test_model_deployments import local_replica_context, stop_local_app

    monkeypatch.setenv("SVC_SRUN_COMMAND", " ".join(SRUN))
    monkeypatch.setenv("SVC_SRUN_DIR", str(tmp_path))
    runtime = runtime_settings(parse_config(CONFIG).config).model_dump(mode="json", exclude_none=True)
    with local_replica_context():
        handle = serve.run(
            DecisionModel.bind(runtime=runtime),
            name="test-managed-decisions",
            route_prefix=None,
            _local_testing_mode=True,
        )
        try:
            info = handle.info.remote().result()
            assert info["managed"] is True and info["deployment"] == "dm" and info["error"] is None
            answer = handle.decide.remote(ask("please refund the duplicate charge")).result()
            assert answer["answers"]["team"]["choice"] == "billing"
            assert [c["name"] for c in handle.models.remote().result()] == ["decision-model"]
            with pytest.raises(RuntimeCallError) as err:
                handle.decide.remote(ask("x", model="no-such-model")).result()
            assert err.value.status == 404
            socket = tmp_path / "local" / "dm.sock"  # SVC_SRUN_DIR / <replica id> / <process>.sock
            assert socket.exists()
        finally:
            stop_local_app(handle)  # the destructor stops the worker
    stopped = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://srun")
    with stopped, pytest.raises(httpx.TransportError):
        stopped.get("/health/live", timeout=2)


def test_a_worker_whose_router_is_gone_stops_itself(tmp_path):
    router = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])  # lives until killed
    env = {**os.environ, "SVC_SRUN_PARENT_PID": str(router.pid), "SVC_SR_ENCODER_THREADS": "1"}
    worker = subprocess.Popen(
        [*SRUN, "run", "minilm-reranker", "--uds", str(tmp_path / "w.sock"), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert _answers_live(tmp_path / "w.sock", worker)  # up, and watching its router
        router.kill()
        router.wait()
        assert worker.wait(timeout=30) is not None  # SIGTERM to itself, then a clean uvicorn exit
    finally:
        for proc in (router, worker):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _answers_live(uds: Path, worker: subprocess.Popen[bytes], timeout_s: float = 90.0) -> bool:
    """Wait until the worker answers /health/live on `uds` (False if it exits first or never does)."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(uds)), base_url="http://srun") as client:
        while worker.poll() is None and time.monotonic() < deadline:
            try:
                if client.get("/health/live", timeout=2).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            threading.Event().wait(0.1)
    return False
