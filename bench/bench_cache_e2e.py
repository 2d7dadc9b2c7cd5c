"""End-to-end cache-hit latency: a chat request answered from the response cache, in-process.

    .venv/bin/python bench/bench_cache_e2e.py [--sizes 1000 10000 100000] [--requests 200]
        [--rounds 3] [--backends memory redis milvus] [--redis-url redis://...] [--json]

The standalone Ingress app (app/api/app.py `create_app`) over a RouterPipeline with the real
int8 MiniLM encoder, reached through httpx's ASGI transport (no Ray, no socket on the client
side); one decision turns the semantic cache on, and `backend_type` picks the store
(memory: exact scan; redis: a local valkey-server with RediSearch, tests/fakes/stores.py,
unless --redis-url; milvus: Milvus Lite in a temporary folder, sealed after the fill). The
upstream is a real HTTP server on 127.0.0.1 (tests/fakes/upstream.py) that a hit never reaches.

Per backend and size N, the request's partition (app/pipeline/phases/cache.py) is filled with
N entries: the --requests prompts' own embeddings and N - requests random unit vectors,
shuffled, in bulk (bench/bench_cache.py's fills), all holding one answer. Each round then sends every prompt
once and times the whole request (body in, cached answer out: encode, route, lookup, reply);
every answer must carry x-vsr-cache-hit: true and the cached text, and the upstream must
see nothing. The figure
per size is the median over --rounds of each round's p50/p99; `encode p50` is one MiniLM
encode of the same prompts, the floor under every hit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # as Ray replicas run (bench/bench_cache.py)

import httpx  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.api.app import StaticConfigView, create_app  # noqa: E402
from app.config.document import RouterConfig  # noqa: E402
from app.pipeline import PipelineServices, RouterPipeline, cache_calls, cache_partition, encoder_embed  # noqa: E402
from app.runtime.encoder import MiniLMEncoder, shared_encoder  # noqa: E402
from app.upstream.client import UpstreamClient  # noqa: E402
from bench.bench_cache import BenchBackend, build_backend, redis_server, unit_rows  # noqa: E402
from bench.latency import percentile  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

BACKENDS = ("memory", "redis", "milvus")
MODEL, DECISION = "cached-model", "faq"
TOPICS = ["reset my password", "export a report", "change the billing plan", "add a team member"]


def prompts(n: int) -> list[str]:
    return [f"FAQ {i}: how do I {TOPICS[i % len(TOPICS)]} (case {i * 7919 % 100003})?" for i in range(n)]


def document(upstream: FakeUpstream, backend: str, size: int, redis_url: str | None) -> dict[str, Any]:
    store: dict[str, Any] = {"backend_type": backend, "max_entries": size, "ttl_seconds": 3600}
    if backend == "redis":
        store["redis"] = {"url": redis_url, "index_name": f"e2e_{size}", "key_prefix": f"e2e:{size}:"}
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "plain-model"},
            "models": [
                {"name": name, "backend_refs": [{"base_url": upstream.base_url}]}
                for name in ("plain-model", MODEL)
            ],
        },
        "routing": {
            "signals": {"keywords": [{"name": "faq", "keywords": ["FAQ"]}]},
            "decisions": [
                {
                    "name": DECISION,
                    "rules": {"type": "keyword", "name": "faq"},
                    "modelRefs": [{"model": MODEL}],
                    "plugins": [{"type": "semantic-cache", "configuration": {"similarity_threshold": 0.95}}],
                }
            ],
        },
        # The store's settings; the cache is on only where the decision's plugin says so.
        "global": {"stores": {"response_cache": store}},
    }


def chat(text: str) -> dict[str, Any]:
    return {"model": "MoM", "messages": [{"role": "user", "content": text}]}


# The one cached answer every entry holds: a hit must return it.
ANSWER: dict[str, Any] = {
    "id": "chatcmpl-cached",
    "object": "chat.completion",
    "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "a cached answer"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
}


def fill(bench: BenchBackend, texts: list[str], vectors: np.ndarray, size: int, seed: int = 0) -> None:
    """N entries in the prompts' partition: the prompts' own vectors among random fillers."""
    partition = cache_partition(MODEL, DECISION, chat(texts[0]))
    if any(cache_partition(MODEL, DECISION, chat(t)) != partition for t in texts):
        raise RuntimeError("the bench prompts must share one partition")
    rng = np.random.default_rng(seed)
    rows = np.concatenate([vectors, unit_rows(rng, max(size - len(texts), 0))])
    bench.fill(partition, rows[rng.permutation(len(rows))], ANSWER)


class NotAHit(RuntimeError):
    """A request the cache did not answer: the store's index missed an entry it holds."""


async def time_hits(client: httpx.AsyncClient, texts: list[str]) -> list[float]:
    latencies = []
    for i, text in enumerate(texts):
        started = time.perf_counter()
        response = await client.post("/v1/chat/completions", json=chat(text))
        latencies.append(time.perf_counter() - started)
        content = response.json()["choices"][0]["message"]["content"] if response.status_code == 200 else None
        if response.headers.get("x-vsr-cache-hit") != "true" or content != "a cached answer":
            raise NotAHit(f"request {i} was not a cache hit: {response.status_code} {response.text[:200]}")
    return latencies


async def measure(
    config: RouterConfig, bench: BenchBackend, encoder: MiniLMEncoder, texts: list[str], rounds: int
) -> list[dict[str, float]]:
    calls = cache_calls(bench.cache)
    services = PipelineServices(
        embed=encoder_embed(encoder),
        cache_lookup=calls.lookup,
        cache_store=calls.store,
        cache_epoch=calls.epoch,
    )
    pipeline = RouterPipeline(config, services)
    await pipeline.warm_up()
    app = create_app(pipeline, UpstreamClient(), StaticConfigView(config))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc-sr", timeout=60) as client:
        await time_hits(client, texts[:10])  # warm-up: encoder shapes, connection pools, the store's client
        results = []
        for _ in range(rounds):
            latencies = await time_hits(client, texts)
            results.append(
                {
                    "p50_ms": percentile(latencies, 50, scale=1000),
                    "p99_ms": percentile(latencies, 99, scale=1000),
                }
            )
    return results


def encode_p50_ms(encoder: MiniLMEncoder, texts: list[str]) -> float:
    samples = []
    for text in texts:
        started = time.perf_counter()
        encoder.encode([text])
        samples.append(time.perf_counter() - started)
    return percentile(samples, 50, scale=1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument(
        "--requests", type=int, default=200, help="distinct prompts, each sent once per round"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--redis-url", help="a Redis with the search module (default: start a local one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    encoder = shared_encoder()
    encoder.warm_up()
    texts = prompts(args.requests)
    vectors = np.asarray(encoder.encode(texts), dtype=np.float32)
    print(f"encode p50 {encode_p50_ms(encoder, texts):.3f} ms (one prompt, MiniLM int8)", flush=True)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack, FakeUpstream(name="unused") as upstream:
        workdir = Path(tmp)
        url = stack.enter_context(redis_server(args.redis_url, workdir)) if "redis" in args.backends else None
        for backend in args.backends:
            for size in args.sizes:
                config = RouterConfig.model_validate(document(upstream, backend, size, url))
                state_dir = workdir / f"{backend}-{size}"
                state_dir.mkdir()
                bench = build_backend(config.global_.stores.response_cache, state_dir)
                upstream.reset()
                try:
                    fill(bench, texts, vectors, size)
                    rounds = asyncio.run(measure(config, bench, encoder, texts, args.rounds))
                except NotAHit as exc:  # reported, and the other rows still run
                    print(f"{backend:<7} entries={size:>6}  NOT MEASURED: {exc}", flush=True)
                    continue
                finally:
                    bench.close()
                if upstream.request_count:
                    raise RuntimeError(f"{upstream.request_count} requests reached the upstream")
                report(backend, size, rounds, args.json)


def report(backend: str, size: int, rounds: list[dict[str, float]], as_json: bool) -> None:
    p50 = float(np.median([r["p50_ms"] for r in rounds]))
    p99 = float(np.median([r["p99_ms"] for r in rounds]))
    if as_json:
        print(
            json.dumps(
                {
                    "backend": backend,
                    "entries": size,
                    "hit_p50_ms": round(p50, 3),
                    "hit_p99_ms": round(p99, 3),
                }
            )
        )
        return
    rounds_p50 = " ".join(f"{r['p50_ms']:.2f}" for r in rounds)
    print(
        f"{backend:<7} entries={size:>6}  e2e hit p50 {p50:.3f} ms  p99 {p99:.3f} ms  (rounds' p50: {rounds_p50})",
        flush=True,
    )


if __name__ == "__main__":
    main()
