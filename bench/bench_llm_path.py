"""One vLLM engine reached two ways behind the router: in the Serve application by
DeploymentHandle (`llm_config`), and as vLLM's own HTTP server (`backend_refs`).

    .venv/bin/python bench/bench_llm_path.py [--requests 200] [--rounds 3] [--json]

Both engines serve the same tiny Llama checkpoint (tests/fakes/tiny_llama.py, built here)
with the same engine arguments, from the vLLM environment (.venv-vllm, scripts/vllm-venv.sh).
The HTTP one is `python -m vllm.entrypoints.openai.api_server` on 127.0.0.1. Requests go to
the svc-sr Ingress (Ray Serve, fast path as `svc-sr serve` runs it) with the model named
explicitly (no signals), `max_tokens: 1`, one at a time, the two paths alternating request by
request so both see the same machine. Reported per path: the median over rounds of each
round's p50 and p99 of the whole request, and the in-cluster/HTTP ratio of the p50s.
Streaming first-byte time is measured the same way with `stream: true`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.common.ports import free_port  # noqa: E402
from bench.latency import percentile  # noqa: E402
from tests.fakes.processes import wait_http_ok  # noqa: E402

ENGINE_KWARGS = {"max_model_len": 256, "dtype": "bfloat16"}


def vllm_server(python: Path, model_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "256", "--dtype", "bfloat16", "--disable-uvicorn-access-log",
    ]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def config(model_dir: Path, python: Path, http_port: int) -> dict[str, Any]:
    llm = {
        "model_loading_config": {"model_id": "tiny", "model_source": str(model_dir)},
        "engine_kwargs": ENGINE_KWARGS,
        "deployment_config": {"ray_actor_options": {"num_cpus": 0.25}},
        "runtime_env": {"py_executable": str(python)},
    }
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "in-cluster"},
            "models": [
                {"name": "in-cluster", "provider_model_id": "tiny", "llm_config": llm},
                {
                    "name": "http",
                    "provider_model_id": "tiny",
                    "backend_refs": [{"endpoint": f"127.0.0.1:{http_port}"}],
                },
            ],
        },
        "routing": {"decisions": []},
    }


def one(client: httpx.Client, url: str, model: str, stream: bool) -> float:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 1,
        "stream": stream,
    }
    began = time.perf_counter()
    if stream:
        with client.stream("POST", url, json=body) as response:
            response.raise_for_status()
            chunks = response.iter_bytes()
            next(chunks)
            elapsed = time.perf_counter() - began
            for _ in chunks:
                pass
        return elapsed
    response = client.post(url, json=body)
    response.raise_for_status()
    assert response.headers["x-selected-model"] == model
    return time.perf_counter() - began


def measure(url: str, requests: int, rounds: int, stream: bool) -> dict[str, dict[str, float]]:
    per_round: dict[str, list[tuple[float, float]]] = {"in-cluster": [], "http": []}
    with httpx.Client(timeout=60) as client:
        for model in per_round:  # warm both paths
            for _ in range(10):
                one(client, url, model, stream)
        for _ in range(rounds):
            samples: dict[str, list[float]] = {"in-cluster": [], "http": []}
            for _ in range(requests):
                for model in samples:
                    samples[model].append(one(client, url, model, stream))
            for model, values in samples.items():
                per_round[model].append((percentile(values, 50, 1000), percentile(values, 99, 1000)))
    return {
        model: {"p50_ms": median(r[0] for r in rounds_), "p99_ms": median(r[1] for r in rounds_)}
        for model, rounds_ in per_round.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    python = Path(os.environ.get("SVC_SR_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
    work = Path(tempfile.mkdtemp(prefix="bench-llm-"))
    model_dir = work / "tiny"
    subprocess.run(
        [str(python), str(ROOT / "tests/fakes/tiny_llama.py"), str(model_dir)],
        check=True,
        capture_output=True,
    )

    from deployments.serve_env import apply_fast_path_env

    apply_fast_path_env()
    os.environ["SVC_SR_MANAGEMENT_STATE_DIR"] = str(work / "state")
    import ray
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    http_port, serve_port = free_port(), free_port()
    server = vllm_server(python, model_dir, http_port)
    try:
        ray.init(num_cpus=6, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": serve_port})
        graph = GraphArgs(
            config=config(model_dir, python, http_port), metrics={"enabled": False}, decision_model=False
        )
        serve.run(build_app(graph), name="bench", route_prefix="/")
        wait_http_ok(f"http://127.0.0.1:{http_port}/health", 300.0, poll_s=1.0)
        url = f"http://127.0.0.1:{serve_port}/v1/chat/completions"
        results = {
            "non_stream": measure(url, args.requests, args.rounds, stream=False),
            "stream_first_byte": measure(url, args.requests, args.rounds, stream=True),
        }
        for figures in results.values():
            figures["ratio_p50"] = {
                "in_cluster_over_http": figures["in-cluster"]["p50_ms"] / figures["http"]["p50_ms"]
            }
        if args.json:
            print(json.dumps(results, indent=2))
        else:
            for kind, figures in results.items():
                for path in ("in-cluster", "http"):
                    print(
                        f"{kind:18s} {path:10s} p50 {figures[path]['p50_ms']:7.2f} ms  p99 {figures[path]['p99_ms']:7.2f} ms"
                    )
                print(
                    f"{kind:18s} in-cluster/http p50 ratio {figures['ratio_p50']['in_cluster_over_http']:.3f}"
                )
    finally:
        server.terminate()
        server.wait(timeout=30)
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
