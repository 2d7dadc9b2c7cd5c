"""Queue admission (429 with Retry-After) on a worker over a Unix socket, and a worker killed
and restarted by the supervisor while a client keeps getting answers."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from app.common.supervisor import RestartPolicy
from app.srun.client import RuntimeCallError, SrunClient
from app.srun.settings import RuntimeSettings, SrunEnvironment
from app.srun.supervisor import RuntimeSupervisor


@pytest.fixture(scope="module")
def tight_worker(worker_factory):
    # One queued request per model, and a long batch window so the first one waits in the queue.
    return worker_factory(["minilm-embedding", "--max-queue", "1", "--batch-window-ms", "200"], uds=True)


async def test_a_burst_over_max_queue_is_answered_429(tight_worker):
    async with tight_worker.async_client(timeout=30.0) as client:
        responses = await asyncio.gather(
            *(client.post("/v1/embeddings", json={"input": f"burst {i}"}) for i in range(8))
        )
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(200) >= 1 and statuses.count(429) >= 1
    rejected = next(r for r in responses if r.status_code == 429)
    assert rejected.headers["retry-after"] == "1"
    assert rejected.json()["error"]["code"] == "overloaded"
    assert "queue" in rejected.headers["server-timing"]


async def test_the_queue_admits_again_after_the_burst(tight_worker):
    async with tight_worker.async_client(timeout=30.0) as client:
        response = await client.post("/v1/embeddings", json={"input": "after the burst"})
    assert response.status_code == 200


async def test_max_queued_tokens_rejects_a_request_too_big_for_the_queue(worker_factory, tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - model: minilm-embedding\n    name: emb\n    engine: onnxruntime\n")
    worker = worker_factory(["--models", str(models), "--max-queued-tokens", "50"], uds=True)
    async with worker.async_client(timeout=30.0) as client:
        small = await client.post("/v1/embeddings", json={"model": "emb", "input": "short"})
        big = await client.post("/v1/embeddings", json={"model": "emb", "input": "many words here " * 40})
        cards = (await client.get("/v1/models")).json()["data"]
    assert small.status_code == 200 and small.json()["model"] == "emb"
    assert big.status_code == 429 and big.json()["error"]["code"] == "overloaded"
    assert cards[0]["served_name"] == "emb" and cards[0]["name"] == "minilm-embedding"


async def test_supervisor_restarts_a_killed_worker_while_a_client_keeps_answering(tmp_path):
    settings = RuntimeSettings.model_validate(
        {"model_deployments": {"emb": {"artifact": "minilm-embedding"}}}
    )
    env = SrunEnvironment(command=[sys.executable, "-m", "app.cli.srun"], dir=tmp_path, cpu_threads=1)
    supervisor = RuntimeSupervisor(settings, env, policy=RestartPolicy(min_backoff_s=0.2, stop_timeout_s=5.0))
    supervisor.start()
    try:
        assert await supervisor.wait_ready(60)
        client = supervisor.client_for("emb")
        first = await client.embeddings({"input": "before the crash"})
        assert len(first["data"][0]["embedding"]) == 384
        process = supervisor.replicas["emb"][0].process
        assert process is not None and process.process is not None
        os.kill(process.process.pid, signal.SIGKILL)
        answers = []
        for i in range(6):  # each call retries through the restart until its deadline
            out = await client.embeddings({"input": f"during restart {i}"}, deadline_s=60)
            answers.append(out)
        assert len(answers) == 6 and all(len(a["data"][0]["embedding"]) == 384 for a in answers)
        assert process.restarts >= 1
        await supervisor.check_health()
        assert supervisor.metrics.value("svc_model_runtime_restarts_total", deployment="emb") >= 1
        assert (
            supervisor.metrics.value("svc_model_runtime_requests_total", deployment="emb", outcome="ok") >= 7
        )
        with pytest.raises(RuntimeCallError) as err:
            await client.embeddings({"input": "x", "dimensions": 3})
        assert err.value.status == 400 and err.value.outcome == "rejected"
    finally:
        await supervisor.stop()
    assert not process.alive()


async def test_client_against_nothing_times_out_as_unavailable(tmp_path):
    async with SrunClient(uds=str(tmp_path / "absent.sock"), timeout_s=0.3) as client:
        with pytest.raises(RuntimeCallError) as err:
            await client.decisions({"state": "x", "questions": {}})
    assert err.value.status in (503, 504)


async def test_a_worker_whose_every_model_failed_is_restarted(tmp_path):
    settings = RuntimeSettings.model_validate({"model_deployments": {"bad": {"artifact": "no-such-model"}}})
    env = SrunEnvironment(command=[sys.executable, "-m", "app.cli.srun"], dir=tmp_path, cpu_threads=1)
    supervisor = RuntimeSupervisor(settings, env, policy=RestartPolicy(min_backoff_s=0.2, stop_timeout_s=5.0))
    supervisor.start()
    process = supervisor.replicas["bad"][0].process
    try:
        assert not await supervisor.wait_ready(1.0)  # never ready: it only reports failed
        for _ in range(200):
            await supervisor.check_health()
            if process.restarts >= 1:
                break
            await asyncio.sleep(0.1)
        assert process.restarts >= 1
        assert supervisor.metrics.value("svc_model_runtime_ready", deployment="bad") == 0.0
    finally:
        await supervisor.stop()
