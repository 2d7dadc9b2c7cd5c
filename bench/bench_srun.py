#!/usr/bin/env python
"""Latency and throughput of a real `svc-srun run` worker over HTTP (TCP, 127.0.0.1).

Starts one worker (decision-model, domain-classifier, minilm-embedding; batch window 2 ms,
result cache off so every request computes), then for each surface runs N requests at
concurrency 1 and 16 (distinct texts): per-request p50/p99 (client side, bench/latency.py),
throughput, and the mean of the worker's Server-Timing queue/forward phases.

  nice .venv/bin/python bench/bench_srun.py [--requests 160] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.common.ports import free_port  # noqa: E402
from app.srun.timing import parse_server_timing  # noqa: E402
from bench.latency import percentile  # noqa: E402

PROMPTS = [
    "What is the capital of Australia?",
    "My parcel never arrived and the tracking has not changed in a week.",
    "Write a Python function that merges two sorted lists and explain its complexity.",
    "I was charged twice for my subscription this month, please refund one payment.",
    "The app crashes every time I open the settings page on Android.",
    "Is a verbal agreement to sell a house enforceable in court?",
    "How do enzymes lower the activation energy of a reaction?",
    "Explain the difference between TCP and UDP for a beginner.",
]
QUESTIONS = {
    "team": {
        "type": "choice",
        "criteria": {
            "billing": "Invoices, charges, refunds or payment methods",
            "technical": "An error, a crash or a bug",
            "shipping": "Delivery status, tracking or the shipping address",
            "other": "Anything else",
        },
    },
    "refund": {"type": "noul", "instructions": "Does the customer ask for their money back?"},
    "urgency": {"type": "score", "criteria": ["not urgent", "soon", "right now"]},
}


def body(surface: str, i: int) -> dict[str, Any]:
    text = f"{PROMPTS[i % len(PROMPTS)]} (request {i})"
    if surface == "decisions":
        return {"model": "decision-model", "state": text, "questions": QUESTIONS}
    if surface == "classify":
        return {"model": "domain-classifier", "input": text}
    return {"model": "minilm-embedding", "input": text}


async def run(client: httpx.AsyncClient, surface: str, n: int, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    phases: dict[str, list[float]] = {"queue": [], "forward": []}
    counter = iter(range(n))

    async def one_client() -> None:
        for i in counter:
            started = time.perf_counter()
            response = await client.post(f"/v1/{surface}", json=body(surface, i))
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            timing = parse_server_timing(response.headers.get("server-timing"))
            for phase in phases:
                phases[phase].append(timing.get(phase, 0.0))

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "p50_ms": round(percentile(latencies, 50, 1000), 2),
        "p99_ms": round(percentile(latencies, 99, 1000), 2),
        "req_per_s": round(n / elapsed, 1),
        "queue_ms_mean": round(sum(phases["queue"]) / n, 2),
        "forward_ms_mean": round(sum(phases["forward"]) / n, 2),
    }


async def bench(port: int, n: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
        for surface in ("decisions", "classify", "embeddings"):
            await run(client, surface, 16, 4)  # warm the connection pool and shapes
            for concurrency in (1, 16):
                results[f"{surface} c{concurrency}"] = await run(client, surface, n, concurrency)
                print(surface, f"c{concurrency}", results[f"{surface} c{concurrency}"], flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli.srun",
            "run",
            "decision-model",
            "domain-classifier",
            "minilm-embedding",
            "--port",
            str(port),
            "--result-cache-entries",
            "0",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env={**os.environ},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit("worker did not become ready")
        results = asyncio.run(bench(port, args.requests))
        load = os.getloadavg()[0]
        print(json.dumps({"load_avg_1m": round(load, 2), "results": results}, indent=2))
        if args.json:
            args.json.write_text(json.dumps({"load_avg_1m": load, "results": results}, indent=2))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


if __name__ == "__main__":
    main()
