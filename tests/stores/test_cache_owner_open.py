"""The ResponseCache replica opens a new store before it serves from it (docs/storage.md "One
owner"), on the replica's own class without a Ray cluster: `reconfigure` (a start's, or an
activation's user_config) returns only once Milvus Lite's data directory is open and the
answer is served from it; a store that does not answer the open is used all the same, degraded
(a miss, a skipped write), so a store that is down never holds the replica (and /ready) back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from app.cache.factory import MILVUS_LITE_DB
from app.common.ports import free_port
from deployments.response_cache import ResponseCache

VECTOR = np.random.default_rng(7).standard_normal(384)
ANSWER = {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "two"}}]}


def replica(state_dir: Path) -> Any:
    return ResponseCache.func_or_class(observability=None, state_dir=str(state_dir))  # type: ignore[attr-defined]  # the bound Serve deployment's class


async def test_the_store_is_open_when_reconfigure_returns(tmp_path: Path) -> None:
    cache = replica(tmp_path)
    await cache.reconfigure({"response_cache": {"enabled": True, "backend_type": "memory"}})
    assert await cache.store("m|d", VECTOR, ANSWER)
    assert not (tmp_path / MILVUS_LITE_DB).exists()

    await cache.reconfigure({"response_cache": {"enabled": True, "backend_type": "milvus"}})
    # Milvus Lite creates (and locks) its directory when it opens, not when the backend is built.
    assert (tmp_path / MILVUS_LITE_DB / "LOCK").exists()
    assert (await cache.stats())["backend"] == "milvus"
    assert await cache.lookup("m|d", VECTOR, 0.9) is None  # a new store: the memory entry stayed there
    assert await cache.store("m|d", VECTOR, ANSWER)
    hit = await cache.lookup("m|d", VECTOR, 0.9)
    assert hit is not None and hit["response"] == ANSWER


async def test_a_store_that_does_not_answer_the_open_degrades(tmp_path: Path) -> None:
    cache = replica(tmp_path)
    down = {"uri": f"http://127.0.0.1:{free_port()}", "timeout_seconds": 1}
    began = time.monotonic()
    await cache.reconfigure({"response_cache": {"enabled": True, "backend_type": "milvus", "milvus": down}})
    assert time.monotonic() - began < 30  # bounded by the store's timeout, never a hang
    assert await cache.lookup("m|d", VECTOR, 0.9) is None  # a miss, not an error
    assert not await cache.store("m|d", VECTOR, ANSWER)  # a skipped write, not an error
    # Counted where /metrics sums every replica's recorder.
    assert cache._metrics.value("svc_router_cache_errors_total", operation="lookup") == 1
    assert cache._metrics.value("svc_router_cache_errors_total", operation="store") == 1


async def test_the_owner_probes_a_milvus_lite_candidate_beside_its_live_store(tmp_path: Path) -> None:
    """POST /api/v1/storage/response-cache/test runs the probe in the ResponseCache replica: a
    Milvus Lite candidate (the live store's own directory here) opens in the process that owns
    it, where a probe from the Ingress would find it locked, or lock it against the owner."""
    cache = replica(tmp_path)
    await cache.reconfigure({"response_cache": {"enabled": True, "backend_type": "milvus"}})
    assert await cache.store("m|d", VECTOR, ANSWER)
    await cache.probe({"backend_type": "milvus"})  # raises when the candidate does not answer
    hit = await cache.lookup("m|d", VECTOR, 0.9)
    assert hit is not None and hit["response"] == ANSWER  # the live store still serves
    assert (await cache.stats())["entries"] == 1  # the probe's throwaway partition was cleared
