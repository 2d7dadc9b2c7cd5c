"""The ext_proc bridge's cost: Envoy with and without the filter, same upstream, one run.

    .venv/bin/python bench/bench_envoy.py [--requests 300] [--ray]

Rows (concurrency 1 and 16, non-stream chat, keyword + embedding signals and the
semantic cache on, every prompt distinct):
- direct:        the instant upstream called directly
- envoy:         Envoy without ext_proc -> upstream
- envoy+bridge:  Envoy -> ext_proc bridge (in-process RouterPipeline) -> upstream
- route():       the pipeline's own work per request, timed around route()+complete()
- bridge_overhead = envoy+bridge - envoy - route()   (goal: <= 5 ms p50)
With --ray, also `envoy+sidecar`: Envoy -> the sidecar process -> Router deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cache.memory import InMemorySemanticCache  # noqa: E402
from app.common.ports import free_port
from app.common.supervisor import SupervisedProcess  # noqa: E402
from app.config.loader import parse_config  # noqa: E402
from app.envoy.config import EnvoyPorts, build_envoy_config  # noqa: E402
from app.envoy.process import EnvoyProcess, write_config  # noqa: E402
from app.extproc.bridge import BridgeSettings, ExtProcBridge  # noqa: E402
from app.extproc.server import start_bridge_server  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline, cache_calls, encoder_embed  # noqa: E402
from app.runtime.encoder import shared_encoder  # noqa: E402
from bench.bench_routing import bench_config, run_load, summary  # noqa: E402
from bench.latency import percentile  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402


class TimedRouter:
    """The pipeline as the bridge's Router, timing its own work per call."""

    def __init__(self, pipeline: RouterPipeline) -> None:
        self.pipeline = pipeline
        self.route_s: list[float] = []
        self.complete_s: list[float] = []

    async def route(
        self, body: dict[str, Any], headers: dict[str, str], request_id: str, grant: Any = None
    ) -> Any:
        started = time.perf_counter()
        try:
            return await self.pipeline.route(body, headers, request_id)
        finally:
            self.route_s.append(time.perf_counter() - started)

    async def complete(self, plan: Any, report: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self.pipeline.complete(plan, report)
        finally:
            self.complete_s.append(time.perf_counter() - started)


def start_envoy(
    config: dict, work: Path, name: str, bridge_port: int, with_ext_proc: bool
) -> tuple[EnvoyProcess, str]:
    loaded = parse_config(config).config
    listener, admin = free_port(), free_port()
    ports = EnvoyPorts.from_config(
        loaded,
        listener_port=listener,
        admin_port=admin,
        ext_proc_port=bridge_port,
        management_port=free_port(),
    )
    path = write_config(build_envoy_config(loaded, ports, with_ext_proc=with_ext_proc), work / f"{name}.yaml")
    envoy = EnvoyProcess(path, admin_port=admin, log_path=work / f"{name}.log").start()
    envoy.wait_ready()
    return envoy, f"http://127.0.0.1:{listener}/v1/chat/completions"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--ray", action="store_true", help="also measure the sidecar + Ray Router path")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(120)

    with FakeUpstream(name="instant") as upstream, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        config = bench_config(upstream)
        calls = cache_calls(InMemorySemanticCache())
        services = PipelineServices(
            embed=encoder_embed(shared_encoder()),
            cache_lookup=calls.lookup,
            cache_store=calls.store,
            cache_epoch=calls.epoch,
        )
        router = TimedRouter(RouterPipeline(parse_config(config).config, services))
        on_loop(router.pipeline.warm_up())
        bridge = ExtProcBridge(router, BridgeSettings())
        server = on_loop(start_bridge_server(bridge, port=0))
        plain, plain_url = start_envoy(config, work, "plain", server.svc_sr_port, with_ext_proc=False)
        routed, routed_url = start_envoy(config, work, "routed", server.svc_sr_port, with_ext_proc=True)
        targets = [
            ("direct", f"{upstream.base_url}/chat/completions", "general"),
            ("envoy", plain_url, "general"),
            ("envoy+bridge", routed_url, "MoM"),
        ]
        extra: list[Any] = []
        try:
            if args.ray:
                targets.append(("envoy+sidecar", *start_ray_path(config, work, extra), "MoM"))
            for _, url, model in targets:  # warm-up: pools, encoder shapes, replicas
                asyncio.run(run_load(url, model, 40, 4))
            for concurrency in (1, 16):
                for label, url, model in targets:
                    router.route_s.clear()
                    router.complete_s.clear()
                    latencies, rps = asyncio.run(run_load(url, model, args.requests, concurrency))
                    results[f"{label}@c{concurrency}"] = {**summary(latencies), "rps": rps}
                    if label == "envoy+bridge":
                        on_loop(bridge.drain())
                        work_s = [r + c for r, c in zip(router.route_s, router.complete_s, strict=False)]
                        results[f"route()@c{concurrency}"] = {
                            "p50_ms": percentile(router.route_s, 50, 1000),
                            "p99_ms": percentile(router.route_s, 99, 1000),
                            "route+complete_p50_ms": percentile(work_s, 50, 1000),
                        }
        finally:
            plain.stop()
            routed.stop()
            for stop in extra:
                stop()
            on_loop(server.stop(0))
    for c in (1, 16):
        e, b, r = results[f"envoy@c{c}"], results[f"envoy+bridge@c{c}"], results[f"route()@c{c}"]
        results[f"bridge_overhead@c{c}"] = {
            "p50_ms": b["p50_ms"] - e["p50_ms"] - r["p50_ms"],
            "p99_ms": b["p99_ms"] - e["p99_ms"] - r["p99_ms"],
        }
    print(json.dumps({k: {m: round(v, 2) for m, v in row.items()} for k, row in results.items()}, indent=2))


def start_ray_path(config: dict, work: Path, cleanup: list[Any]) -> tuple[str]:
    """Ray + the graph + the sidecar process + an Envoy in front of it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from deployments.serve_env import apply_fast_path_env

    apply_fast_path_env()  # as `svc-sr serve` does, before Serve is imported (handle transport)
    import ray
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    config_path = work / "bench.yaml"
    config_path.write_text(yaml.safe_dump(config))
    ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
    serve.run(
        build_app(GraphArgs(config_path=str(config_path), metrics={"enabled": False})),
        name="svc-sr",
        route_prefix="/",
    )
    port = free_port()
    sidecar = SupervisedProcess(
        "sidecar",
        [
            sys.executable,
            "-m",
            "deployments.extproc_sidecar",
            "--config",
            str(config_path),
            "--port",
            str(port),
            "--ray-address",
            ray.get_runtime_context().gcs_address,
        ],
        log_path=work / "sidecar.log",
    ).start()
    from app.cli.gateway import wait_for_port

    wait_for_port("127.0.0.1", port, 90)
    envoy, url = start_envoy(config, work, "sidecar", port, with_ext_proc=True)
    cleanup.extend([envoy.stop, sidecar.stop, serve.shutdown, ray.shutdown])
    return (url,)


if __name__ == "__main__":
    main()
