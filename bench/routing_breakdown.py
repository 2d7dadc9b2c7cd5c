"""Where one c=1 routed request's time goes (docs/performance.md), from the routing headers
and direct DeploymentHandle calls against the same graph `bench_routing.py` builds.

    .venv/bin/python bench/routing_breakdown.py [--requests 150]

- total: client-observed latency through HAProxy/proxy -> Ingress -> Router -> upstream
- ingress_processing: `x-processing-time` (the Ingress's own clock, route + upstream)
- signals: `x-classification-time` (the Router's signal evaluation, the encoder pass included)
- handle_route / handle_noop: Router.route() and a no-op Router call from the driver
- health: GET /health through the front (the front door's own hop)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.common.ports import free_port
from bench.bench_routing import bench_config, prompt  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402


def chat(i: int) -> dict:
    return {"model": "MoM", "messages": [{"role": "user", "content": prompt(i)}]}


async def handle_timings(requests: int) -> tuple[list[float], list[float]]:
    from ray import serve

    router = serve.get_deployment_handle("Router", app_name="svc-sr")
    route, noop = [], []
    for i in range(requests):
        started = time.perf_counter()
        await router.route.remote(chat(10_000 + i), {}, f"h{i}")
        route.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await router.generation.remote()
        noop.append((time.perf_counter() - started) * 1000)
    return route, noop


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=150)
    args = parser.parse_args()
    from deployments.serve_env import apply_fast_path_env

    apply_fast_path_env()  # as `svc-sr serve` does, before Serve is imported (handle transport)
    import ray
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    with FakeUpstream(name="instant") as upstream, tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp, "bench.yaml")
        config_path.write_text(yaml.safe_dump(bench_config(upstream)))
        port = free_port()
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        loop = asyncio.new_event_loop()
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            serve.run(
                build_app(GraphArgs(config_path=str(config_path), metrics={"enabled": False})),
                name="svc-sr",
                route_prefix="/",
            )
            url = f"http://127.0.0.1:{port}"
            rows: dict[str, list[float]] = {
                k: [] for k in ("total", "ingress_processing", "signals", "health")
            }
            with httpx.Client(timeout=30) as client:
                for i in range(40):  # warm-up
                    client.post(f"{url}/v1/chat/completions", json=chat(i))
                for i in range(args.requests):
                    started = time.perf_counter()
                    answer = client.post(f"{url}/v1/chat/completions", json=chat(1_000 + i))
                    rows["total"].append((time.perf_counter() - started) * 1000)
                    rows["ingress_processing"].append(float(answer.headers["x-processing-time"]))
                    rows["signals"].append(float(answer.headers["x-classification-time"]))
                    started = time.perf_counter()
                    client.get(f"{url}/health")
                    rows["health"].append((time.perf_counter() - started) * 1000)
            # The driver's handles live on this loop (throughput-optimized Serve runs a handle's
            # router on its caller's loop), so Serve is shut down from it too.
            rows["handle_route"], rows["handle_noop"] = loop.run_until_complete(handle_timings(args.requests))
        finally:
            loop.run_until_complete(serve.shutdown_async())
            loop.close()
            ray.shutdown()
    print(json.dumps({name: round(statistics.median(values), 2) for name, values in rows.items()}, indent=2))


if __name__ == "__main__":
    main()
