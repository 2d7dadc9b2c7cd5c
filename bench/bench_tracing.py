"""What tracing costs a request's routing: `RouterPipeline.route()` on a keyword-routed config
(no models: what is left is the pipeline's own work, where span overhead shows most), with
tracing off (the no-op tracer, the default) and on (the SDK's provider, always_on sampling, a
batching processor over an in-memory exporter: span creation and hand-off, not the network),
in alternating blocks of 100 requests. Also the bare cost of one span call with tracing off.

    .venv/bin/python bench/bench_tracing.py [--rounds 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from app.common import tracing  # noqa: E402
from app.config.document import RouterConfig  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline  # noqa: E402
from bench.latency import percentile  # noqa: E402

DOCUMENT = {
    "providers": {
        "defaults": {"default_model": "small"},
        "models": [{"name": "small", "backend_refs": [{"endpoint": "127.0.0.1:8000"}]}],
    },
    "routing": {
        "signals": {"keywords": [{"name": f"k{i}", "keywords": [f"word{i}"]} for i in range(4)]},
        "decisions": [
            {
                "name": f"d{i}",
                "rules": {"type": "keyword", "name": f"k{i}"},
                "modelRefs": [{"model": "small"}],
            }
            for i in range(4)
        ],
    },
}


def on() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter(), max_queue_size=100_000))
    tracing.install(provider, "bench")


async def run(rounds: int) -> dict[str, float]:
    pipeline = RouterPipeline(RouterConfig.model_validate(DOCUMENT), PipelineServices())
    carrier = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    times: dict[str, list[float]] = {"off": [], "on": []}
    block = 100  # alternate blocks of requests, so load drifts hit both modes alike
    for start in range(0, rounds, block):
        for mode in ("off", "on") if (start // block) % 2 else ("on", "off"):
            on() if mode == "on" else tracing.shutdown_tracing()
            for index in range(start, start + block):
                text = f"word{index % 4} question {index} {mode}"
                body = {"model": "MoM", "messages": [{"role": "user", "content": text}]}
                started = time.perf_counter()
                await pipeline.route(body, carrier, f"r{index}")
                times[mode].append((time.perf_counter() - started) * 1e3)
    tracing.shutdown_tracing()
    calls = 200_000
    started = time.perf_counter()
    for _ in range(calls):
        with tracing.span("x", parent=carrier):
            pass
    noop_us = (time.perf_counter() - started) / calls * 1e6
    started = time.perf_counter()
    for _ in range(calls):
        with contextlib.nullcontext():
            pass
    baseline_us = (time.perf_counter() - started) / calls * 1e6
    out = {f"{m}_p50_ms": statistics.median(v) for m, v in times.items()}
    out |= {f"{m}_p99_ms": percentile(v, 99) for m, v in times.items()}
    out["added_p50_ms"] = out["on_p50_ms"] - out["off_p50_ms"]
    out["noop_span_us"] = noop_us
    out["nullcontext_us"] = baseline_us  # the same loop around contextlib.nullcontext(), for scale
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = asyncio.run(run(args.rounds))
    for key, value in result.items():
        print(f"{key:>16}: {value:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
