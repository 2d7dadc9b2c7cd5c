"""Rerank (BM25 + fusion), bundles, the result cache, Server-Timing, router-side settings,
the environment and the worker's load states, without HTTP or real models."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from app.runtime.schemas import InvalidRequest, ModelNotFound, NotReady, Overloaded, RuntimeFailure
from app.srun.bundle import run_bundle
from app.srun.cache import ResultCache
from app.srun.rerank import bm25_scores, fuse, rank
from app.srun.runtime_metrics import RuntimeMetrics
from app.srun.schemas import ModelEntry, RejectedInput
from app.srun.settings import RuntimeSettings, SrunEnvironment, signal_timeout_s, unscanned_matches
from app.srun.timing import ServerTiming, parse_server_timing
from app.srun.worker import Worker, WorkerSettings, failure_status

# --------------------------------------------------------------------------- rerank


def test_bm25_prefers_rare_matching_terms():
    docs = ["the cat sat on the mat", "the dog barked", "quantum cat physics", "nothing relevant here"]
    scores = bm25_scores("quantum cat", docs)
    assert int(np.argmax(scores)) == 2
    assert scores[3] == 0 and scores[1] == 0
    assert scores[0] > 0  # one matching term
    assert np.all(bm25_scores("", docs) == 0)


def test_bm25_length_normalisation():
    short, long = "bread recipe", "bread recipe " + "filler words " * 30
    scores = bm25_scores("bread", [short, long, "other"])
    assert scores[0] > scores[1] > 0


def test_fusion_is_bounded_and_monotonic():
    fused = fuse(np.array([0.9, 0.9, 0.1]), np.array([0.0, 5.0, 5.0]))
    assert np.all((fused >= 0) & (fused <= 1))
    assert fused[1] > fused[0]  # same similarity, more BM25
    assert fused[1] > fused[2]  # same BM25, more similarity


def test_rank_orders_and_cuts():
    q = np.array([1.0, 0.0])
    docs = np.array([[0.0, 1.0], [1.0, 0.0], [0.7, 0.7]])
    ranked = rank(q, docs, "apple", ["pear", "apple", "apple pear"], top_n=2)
    assert [r[0] for r in ranked] == [1, 2]
    assert ranked[0][1] >= ranked[1][1]


# --------------------------------------------------------------------------- bundle


Handle = Callable[[str, dict[str, Any], ServerTiming], Awaitable[tuple[dict[str, Any], bytes | None]]]


def _handler(held: asyncio.Event | None = None) -> Handle:
    """A task with {"held": true} runs until `held` is set (a forward still running at the
    deadline); {"yields": n} gives the loop n turns first, so it finishes after later tasks."""

    async def handle(
        surface: str, body: dict[str, Any], timing: ServerTiming
    ) -> tuple[dict[str, Any], bytes | None]:
        if body.get("fail") == "404":
            raise ModelNotFound("no such model")
        if body.get("fail") == "429":
            raise Overloaded("busy")
        for _ in range(body.get("yields", 0)):
            await asyncio.sleep(0)
        if body.get("held") and held is not None:
            await held.wait()
        timing.add("forward", 7.0)
        return {"surface": surface, "echo": body.get("x")}, None

    return handle


_handle = _handler()


async def test_bundle_keeps_order_and_statuses():
    timing = ServerTiming()
    out = await run_bundle(
        {
            "tasks": [
                {"id": "a", "classify": {"x": 1, "yields": 5}},
                {"id": "b", "decisions": {"fail": "404"}},
                {"id": "c", "rerank": {"fail": "429"}},
                {"id": "d", "embeddings": {"x": 4}},
            ]
        },
        _handle,
        failure_status,
        8,
        timing,
    )
    assert [r.id for r in out.results] == ["a", "b", "c", "d"]
    assert [r.status for r in out.results] == [200, 404, 429, 200]
    assert out.results[0].body == {"surface": "classify", "echo": 1}
    assert out.results[2].error.code == "overloaded"
    assert timing.phases["forward"] == 7.0  # the last task's phases, not a sum


async def test_bundle_deadline_and_limits():
    held = asyncio.Event()
    try:
        out = await run_bundle(
            {
                "tasks": [{"id": "slow", "classify": {"held": True}}, {"id": "fast", "classify": {"x": 2}}],
                "options": {"deadline_ms": 100},
            },
            _handler(held),
            failure_status,
            8,
            ServerTiming(),
        )
    finally:
        held.set()  # the held forward may finish now (the deadline did not cancel it)
    assert [r.status for r in out.results] == [504, 200]
    assert out.results[0].error.code == "deadline_exceeded"
    with pytest.raises(RejectedInput) as err:
        await run_bundle(
            {"tasks": [{"id": str(i), "classify": {}} for i in range(3)]},
            _handle,
            failure_status,
            2,
            ServerTiming(),
        )
    assert err.value.limit == 2
    for bad in (
        {"tasks": []},
        {"tasks": [{"id": "a"}]},
        {"tasks": [{"id": "a", "classify": {}, "rerank": {}}]},
        {"tasks": [{"id": "a", "classify": {}}, {"id": "a", "classify": {}}]},
        [],
    ):
        with pytest.raises(InvalidRequest):
            await run_bundle(bad, _handle, failure_status, 8, ServerTiming())


# --------------------------------------------------------------------------- cache, timing


def test_result_cache_lru_and_bypass():
    cache = ResultCache(2)
    keys = [cache.key("classify", "m", {"input": str(i)}) for i in range(3)]
    for i, key in enumerate(keys):
        cache.put(key, str(i).encode())
    assert cache.get(keys[0]) is None and cache.get(keys[2]) == b"2" and len(cache) == 2
    assert cache.key("classify", "m", {"input": "x", "options": {"return_meta": True}}) is None
    assert cache.key("classify", "a", {"input": "x"}) != cache.key("classify", "b", {"input": "x"})
    assert cache.key("classify", "m", {"b": 1, "a": 2}) == cache.key("classify", "m", {"a": 2, "b": 1})
    off = ResultCache(0)
    off.put(keys[0], b"x")
    assert off.get(keys[0]) is None


def test_server_timing_round_trip():
    timing = ServerTiming()
    timing.add("parse", 1.5)
    timing.add("forward", 2.25)
    parsed = parse_server_timing(timing.header())
    assert parsed["parse"] == 1.5 and parsed["forward"] == 2.25 and parsed["total"] >= 0
    assert list(parsed) == ["parse", "tokenize", "queue", "forward", "post", "serialize", "total"]
    assert parse_server_timing('a;dur=x, b;desc="y";dur=3, ;dur=1') == {"b": 3.0}


def test_failure_status():
    assert failure_status(Overloaded("x"))[:2] == (429, "overloaded")
    assert failure_status(ValueError("secret path"))[0] == 500
    assert "secret" not in failure_status(ValueError("secret path"))[2]


# --------------------------------------------------------------------------- router settings


def test_deployment_settings_validation():
    ok = RuntimeSettings.model_validate(
        {
            "model_deployments": {
                "guard": {"artifact": "jailbreak-guard", "process": "p", "device": "cpu"},
                "emb": {"artifact": "minilm-embedding", "process": "p", "device": "cpu"},
                "dm": {"artifact": "decision-model", "input": {"overflow": "window", "max_tokens": 4096}},
                "remote": {
                    "artifact": "x",
                    "replicas": [{"endpoint": "http://10.0.0.2:8100", "served_name": "x"}, {"device": "cpu"}],
                },
            },
            "decision_model": {"deployment": "dm"},
            "model_catalog": {"signal_timeout_ms": 2000},
        }
    )
    assert ok.model_deployments["remote"].managed and ok.model_deployments["dm"].answers_questions
    bad = [
        {"model_deployments": {"d": {"artifact": "x", "revision": "main"}}},
        {"model_deployments": {"d": {"artifact": "x", "device": "cpu", "replicas": [{"device": "cpu"}]}}},
        {
            "model_deployments": {
                "d": {"artifact": "x", "replicas": [{"device": "cpu", "endpoint": "http://h"}]}
            }
        },
        {
            "model_deployments": {
                "d": {"artifact": "decision-model", "input": {"overflow": "truncate", "max_tokens": 9}}
            }
        },
        {"model_deployments": {"d": {"artifact": "decision-model", "input": {"overflow": "window"}}}},
        {"model_deployments": {}, "decision_model": {"deployment": "missing"}},
        {
            "model_deployments": {
                "a": {"artifact": "x", "process": "p", "device": "cpu"},
                "b": {"artifact": "y", "process": "p", "device": "cuda:0"},
            }
        },
        {"model_deployments": {"d": {"artifact": "x", "provider": "openai"}}},
    ]
    for doc in bad:
        with pytest.raises(ValidationError):
            RuntimeSettings.model_validate(doc)


def test_signal_timeout_and_unscanned():
    assert signal_timeout_s(None) == 45.0
    assert signal_timeout_s(10.0) == pytest.approx(9.0)
    assert signal_timeout_s(0.5) == 1.0
    assert signal_timeout_s(10.0, 250) == 0.25
    assert unscanned_matches("block", False) is True
    assert unscanned_matches("allow", False) is False and unscanned_matches("allow", True) is True


def test_environment_parsing():
    env = SrunEnvironment.from_env({}, cpu_budget=8)
    # svc-srun from PATH, else the one installed next to this interpreter (a venv's bin/)
    assert len(env.command) == 1 and env.command[0].endswith("svc-srun")
    assert env.cpu_threads == 4 and env.ready_timeout_s == 600 and env.result_cache == 4096
    env = SrunEnvironment.from_env(
        {
            "SVC_SRUN_CPU_THREADS": "64",
            "SVC_SRUN_READY_TIMEOUT": "30m",
            "SVC_SRUN_RESULT_CACHE": "0",
            "SVC_SRUN_COMMAND": "python -m app.cli.srun",
            "HUB_TOKEN": "hf_secret",
        },
        cpu_budget=8,
    )
    assert env.cpu_threads == 8 and env.ready_timeout_s == 1800 and env.result_cache == 0
    assert env.command == ["python", "-m", "app.cli.srun"]
    assert (
        env.hub_token == "hf_secret" and "hf_secret" not in repr(env) and "hub_token" not in env.model_dump()
    )
    fallback = SrunEnvironment.from_env(
        {"SVC_SRUN_CPU_THREADS": "lots", "SVC_SRUN_READY_TIMEOUT": "soon"}, cpu_budget=1
    )
    assert fallback.cpu_threads == 1 and fallback.ready_timeout_s == 600


def test_runtime_metrics_snapshot():
    m = RuntimeMetrics()
    m.inc("svc_model_runtime_requests_total", deployment="d", outcome="ok")
    m.add("svc_model_runtime_replica_inflight", 1, deployment="d", replica="0")
    m.observe("svc_model_runtime_server_seconds", 0.5, deployment="d", surface="decisions", phase="forward")
    snap = m.snapshot()
    assert snap["svc_model_runtime_requests_total"][(("deployment", "d"), ("outcome", "ok"))] == 1
    assert (
        m.value("svc_model_runtime_server_seconds_sum", deployment="d", surface="decisions", phase="forward")
        == 0.5
    )
    with pytest.raises(AssertionError):
        m.inc("svc_made_up_total")


# --------------------------------------------------------------------------- worker load states


class _Flaky:
    def __init__(self, fail_times: int, exc: Exception) -> None:
        self.fail_times, self.exc, self.calls = fail_times, exc, 0

    def __call__(self, name: str, engine: str, device: str) -> Any:
        self.calls += 1
        if self.calls <= self.fail_times:
            raise self.exc
        from app.srun.catalog import load

        return load(name, engine, device, warm=False)


def _settings(**kw: Any) -> WorkerSettings:
    return WorkerSettings(models=[ModelEntry(model="minilm-reranker")], load_retry_seconds=0, **kw)


def test_transient_load_failures_are_retried():
    loader = _Flaky(2, OSError("disk hiccup"))
    worker = Worker(_settings(load_attempts=5), loader)
    assert worker.health().status == "starting"
    worker.load_now()
    assert loader.calls == 3 and worker.health().status == "ready"
    assert worker.health().models["minilm-reranker"].attempts == 3


def test_attempts_run_out_and_damaged_models_are_not_retried():
    loader = _Flaky(10, OSError("still broken"))
    worker = Worker(_settings(load_attempts=3), loader)
    worker.load_now()
    assert loader.calls == 3 and worker.health().status == "failed"
    damaged = _Flaky(10, NotReady("self-check failed"))
    worker = Worker(_settings(load_attempts=5), damaged)
    worker.load_now()
    assert damaged.calls == 1 and worker.health().status == "failed"


def test_degraded_when_some_models_fail_and_revision_pins():
    settings = WorkerSettings(
        models=[
            ModelEntry(model="minilm-reranker"),
            ModelEntry(model="no-such-model"),
            ModelEntry(model="minilm-reranker@deadbeefcafe", name="pinned"),
        ],
        load_retry_seconds=0,
    )
    worker = Worker(
        settings, lambda n, e, d: __import__("app.srun.catalog", fromlist=["load"]).load(n, e, d, warm=False)
    )
    worker.load_now()
    health = worker.health()
    assert health.status == "degraded"
    assert health.models["no-such-model"].status == "failed"
    assert health.models["pinned"].status == "failed" and "revision" in health.models["pinned"].message
    with pytest.raises(RuntimeFailure) as err:
        worker.slot_for("no-such-model", "rerank")
    assert err.value.status == 503
    with pytest.raises(RuntimeFailure) as err:
        worker.slot_for("minilm-reranker", "classify")
    assert err.value.status == 422
    assert worker.slot_for("reranker", "rerank").served == "minilm-reranker"


def test_health_moves_through_loading_warming_ready():
    import threading

    from app.runtime.schemas import CardLimits
    from app.srun.schemas import WorkerCard

    started, release = threading.Event(), threading.Event()

    class SlowWarm:
        card = WorkerCard(
            name="fake",
            description="d",
            task="embeddings",
            surfaces=["embeddings"],
            limits=CardLimits(
                max_input_tokens=8, max_scan_tokens=8, truncate_tokens=8, max_chars_per_token=8
            ),
        )

        def forward(self, texts: list[str]) -> list[Any]:
            return texts

        def warm_up(self) -> None:
            started.set()
            release.wait(10)

    worker = Worker(WorkerSettings(models=[ModelEntry(model="fake")]), lambda n, e, d: SlowWarm())
    worker.start_loading()
    try:
        assert started.wait(10)
        assert worker.health().status == "warming"
        assert worker.health().models["fake"].status == "warming"
    finally:
        release.set()
    assert worker.wait_loaded(10)
    assert worker.health().status == "ready"


async def test_supervisor_layout_shares_processes_and_attaches_endpoints(tmp_path):
    from app.srun.supervisor import RuntimeSupervisor, worker_command

    settings = RuntimeSettings.model_validate(
        {
            "model_deployments": {
                "guard": {"artifact": "jailbreak-guard", "process": "p", "device": "cpu"},
                "emb": {"artifact": "minilm-embedding", "process": "p", "device": "cpu"},
                "dm": {"artifact": "decision-model"},
                "pool": {
                    "artifact": "minilm-embedding",
                    "replicas": [
                        {"device": "cpu"},
                        {"endpoint": "http://10.1.2.3:8100", "served_name": "emb"},
                    ],
                },
            }
        }
    )
    env = SrunEnvironment(command=["svc-srun"], dir=tmp_path, cpu_threads=2, result_cache=0)
    supervisor = RuntimeSupervisor(settings, env)
    specs = {s.key: s for s in supervisor.process_specs()}
    assert set(specs) == {"p", "dm", "pool-0"}
    assert specs["p"].models == ["jailbreak-guard", "minilm-embedding"] and specs["p"].deployments == [
        "guard",
        "emb",
    ]
    command = worker_command(specs["p"], env)
    assert command[:4] == ["svc-srun", "run", "jailbreak-guard", "minilm-embedding"]
    assert command[command.index("--uds") + 1] == str(tmp_path / "p.sock")
    assert command[command.index("--threads") + 1] == "2"
    assert command[command.index("--result-cache-entries") + 1] == "0"
    assert command[command.index("--max-request-bytes") + 1] == str(64 * 1024 * 1024)
    pool = supervisor.replicas["pool"]
    assert (
        pool[0].process is not None
        and pool[1].process is None
        and pool[1].client.target == "http://10.1.2.3:8100"
    )
    assert supervisor.replicas["guard"][0].process is supervisor.replicas["emb"][0].process
    pool[1].ready = True
    assert {supervisor.client_for("pool").target for _ in range(4)} == {"http://10.1.2.3:8100"}
    pool[1].ready = False
    assert (
        len({supervisor.client_for("pool").target for _ in range(4)}) == 2
    )  # none ready: round-robin over all
    with pytest.raises(KeyError):
        supervisor.client_for("nope")
    await supervisor.stop()
