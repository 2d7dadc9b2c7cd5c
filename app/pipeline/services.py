"""What the pipeline calls outside pure Python: `PipelineServices`, and adapters that build them.

A plain library (no Ray): everything outside the process (encoder, response cache,
learned classifiers) arrives as async callables here; the Ray Router deployment adapts
DeploymentHandles to them, tests pass local implementations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from app.cache.calls import AsyncCache
from app.pipeline.completion import CacheStore, CompletionServices
from app.pipeline.elo_selector import RatingsFeed
from app.pipeline.rag import ResultCache, Retrieve
from app.pipeline.signals.base import CountTokensFn, EmbedFn, EvaluatorFactory
from app.pipeline.signals.kb import KnowledgeBaseFeed
from app.runtime.batching import MicroBatcher
from app.state.session_store import MemorySessionStore, SessionStore
from app.upstream.client import UpstreamClient

if TYPE_CHECKING:  # the host type only: the pipeline need not import the supervisor
    from app.srun.hosting import ManagedRuntimes

Embedder = Callable[[list[str]], Awaitable[np.ndarray]]
# partition -> its epoch token (app/cache/base.py), for the write's stale guard
CacheEpoch = Callable[[str], Awaitable[int]]


class CacheLookup(Protocol):
    async def __call__(self, partition: str, vector: np.ndarray, threshold: float) -> Any: ...


@dataclass
class PipelineServices(CompletionServices):
    """Everything route()/complete() call outside pure Python; complete()'s own services
    (metrics, cache_store, embed, record_replay) are CompletionServices' fields.

    embed: texts -> (n, 384) unit vectors. cache_lookup / cache_store: the response
    cache (None: caching off whatever the config says). cache_epoch: a partition's epoch
    token, read while the lookup runs and carried by the plan's write, so a write that a
    flush overtook is dropped (None: writes go unguarded). evaluators: extra signal
    families by condition type, `(config, services) -> SignalEvaluator` (an entry for
    a built-in type replaces it). count_tokens: exact token counter for `context`
    signals (None: ceil(chars / 4)). phrase_cache: embedded candidate phrases, kept
    across hot reloads. metrics: where route()/complete() record the router metrics.
    record_replay: receives the `router_replay` record of a completed request (None:
    replays are not recorded); called inline, so it must hand the record off quickly.
    llm_client: the upstream client external LLM judges are asked over.
    capture_replays: route() marks replays although record_replay is unset here, because
    another process completes the request and records it (the Ray graph's front doors).
    bound_workers: the svc-srun workers of the model deployments the config's bindings name
    (`ManagedRuntimes`); a bound family is evaluated through it instead of `evaluators`
    (app/pipeline/signals/runtime.py). Read when a config version is built.
    """

    cache_lookup: CacheLookup | None = None
    cache_epoch: CacheEpoch | None = None
    evaluators: dict[str, EvaluatorFactory] = field(default_factory=dict)
    count_tokens: CountTokensFn | None = None
    phrase_cache: dict[str, np.ndarray] = field(default_factory=dict)
    # a bound `embedding` encoder's phrase vectors, one cache per encoder identity (its digest)
    bound_phrase_caches: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    capture_replays: bool = False
    bound_workers: ManagedRuntimes | None = None
    # Asks the external LLM classifiers and guards (app/pipeline/signals/llm_judge.py); None:
    # a rule that needs one errors (on_error decides).
    llm_client: UpstreamClient | None = None
    # The Elo ratings `algorithm.type: elo` selects by, shared by every replica through the
    # management store (app/pipeline/elo_selector.py); None: the initial ratings.
    ratings: RatingsFeed | None = None
    # The knowledge bases `kb` rules score against, read from the management store
    # (app/pipeline/signals/kb.py); None: every kb rule errors.
    knowledge_bases: KnowledgeBaseFeed | None = None
    # The `rag` plugin's vector-store search (app/pipeline/rag.py; the storage service's search,
    # a StorageClient's `retrieve`, app/storage/client.py); None: every rag plugin
    # finds its store unavailable.
    retrieve: Retrieve | None = None
    rag_cache: ResultCache = field(default_factory=ResultCache)
    # Session-aware routing's sessions (app/pipeline/sessions.py): this replica's memory unless
    # the host shares them (the Ray Router: the management store's Redis, when it is Redis).
    sessions: SessionStore | None = field(default_factory=MemorySessionStore)


class CacheCalls(NamedTuple):
    """PipelineServices' cache_lookup, cache_store and cache_epoch over one backend."""

    lookup: CacheLookup
    store: CacheStore
    epoch: CacheEpoch


def cache_calls(backend: Any, offload: bool | None = None) -> CacheCalls:
    """The cache calls over a sync `ResponseCacheStore` (app.cache): inline for an
    in-process backend, in a worker thread for a network store (`offload` None decides by
    the backend; app/cache/calls.py)."""
    cache = AsyncCache(backend, offload)
    return CacheCalls(cache.lookup, cache.store, cache.epoch)


def encoder_embed(encoder: Any, max_batch_items: int = 32) -> EmbedFn:
    """EmbedFn over an in-process MiniLMEncoder, run off the event loop. Concurrent requests
    share calls: with no wait window a lone request runs at once, and requests arriving
    while a call runs go together in the next one (one thread hop for the group; the
    encoder runs their rows one by one, so a vector never depends on its batch-mates).
    Admission is the host's job (Serve's
    max_ongoing_requests), so the queue here is unbounded in practice."""
    batcher: MicroBatcher[str, np.ndarray] = MicroBatcher(
        encoder.encode,
        window_ms=0.0,
        max_batch_items=max_batch_items,
        max_queue=1_000_000,
        max_queued_tokens=1_000_000_000,
    )

    async def embed(texts: list[str]) -> np.ndarray:
        return np.stack(await batcher.submit_many(list(texts)))

    return embed
