"""The `PipelineServices` a benchmark run routes with, in one process and without Ray.

What the Ray graph reaches over DeploymentHandles runs here in process, over the same engine
objects (app/runtime): the MiniLM encoder (`shared_encoder`, micro-batched by `encoder_embed`)
and the learned signal families the config needs (app/pipeline/local_models.py). Only what
the config uses is loaded; a model that fails to load fails the run.

Query vectors come from a `VectorTable`: a run embeds its questions once, in batches, before
routing, and route() finds each question's vector there; a text the table lacks falls through
to the encoder. A vector depends only on its text (the encoder runs every row on its own), never
on the config, so one table may serve many runs (cross-validation folds, several configs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.config.document import RouterConfig
from app.pipeline import PipelineServices, encoder_embed
from app.pipeline.decisions import referenced_signals
from app.pipeline.local_models import Batchers, engine_evaluators, local_engines
from app.pipeline.metrics import RouterMetrics
from app.pipeline.plugins import compile_guards
from app.pipeline.signals.base import EmbedFn
from app.pipeline.signals.harmful import prompt_guard_harmful_rule
from app.pipeline.signals.jailbreak import prompt_guard_rule
from app.runtime.batching import MicroBatcher
from app.runtime.encoder import shared_encoder, token_counter

ProgressFn = Callable[[int, int], None]  # (done, total)
BatchFn = Callable[[list[Any]], None]  # a batch's QuestionResults, as they are scored


class VectorTable:
    """Query vectors by text, filled ahead of routing; `embed` is the pipeline's EmbedFn."""

    def __init__(self, encode: EmbedFn | None = None) -> None:
        self._encode = encode  # None: the shared MiniLM encoder, built on first need
        self._vectors: dict[str, np.ndarray] = {}
        self.misses = 0  # texts embedded while routing (not found in the table)

    def __contains__(self, text: object) -> bool:
        return text in self._vectors

    def __len__(self) -> int:
        return len(self._vectors)

    def _encoder(self) -> EmbedFn:
        if self._encode is None:
            self._encode = encoder_embed(shared_encoder())
        return self._encode

    async def fill(
        self, texts: Sequence[str], batch_size: int = 256, progress: ProgressFn | None = None
    ) -> None:
        """Embed the texts not in the table yet, `batch_size` at a time."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        for start in range(0, len(missing), batch_size):
            chunk = missing[start : start + batch_size]
            self._store(chunk, await self._encoder()(chunk))
            if progress is not None:
                progress(min(start + batch_size, len(missing)), len(missing))

    async def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            self.misses += len(missing)
            self._store(missing, await self._encoder()(missing))
        return np.stack([self._vectors[t] for t in texts])

    def _store(self, texts: list[str], vectors: np.ndarray) -> None:
        for text, vector in zip(texts, np.asarray(vectors, dtype=np.float32), strict=True):
            self._vectors[text] = vector


_shared_table: VectorTable | None = None
_shared_lock = threading.Lock()


def shared_vector_table() -> VectorTable:
    """One table per process, over the shared encoder: runs in one process embed a text once."""
    global _shared_table
    with _shared_lock:
        if _shared_table is None:
            _shared_table = VectorTable()
        return _shared_table


@dataclass
class LocalServices:
    """The services of one run, and the batchers to close when it ends."""

    services: PipelineServices
    batchers: list[MicroBatcher[Any, Any]] = field(default_factory=list)

    async def aclose(self) -> None:
        for batcher in self.batchers:
            await batcher.aclose()


def learned_families(config: RouterConfig) -> frozenset[str]:
    """The model-backed signal families route() will call: referenced rules, decisions' guard
    plugins and the global prompt guard."""
    families = set(referenced_signals(config.routing.decisions))
    for decision in config.routing.decisions:
        families.update(family for family, _ in compile_guards(decision))
    if prompt_guard_rule(config) is not None:
        families.add("jailbreak")
    if prompt_guard_harmful_rule(config) is not None:
        families.add("harmful")
    return frozenset(families & {"domain", "pii", "jailbreak", "harmful"})


@dataclass
class RunFeeds:
    """Where a run's router metrics and replay records go, as live traffic's do: `metrics`
    receives the router metrics (docs/envoy.md) from route() and complete(); `record_replay`
    the replay records of decisions with a `router_replay` plugin (None: not recorded);
    `on_batch` each batch's results as they are scored (a checkpoint: what it raises stops the
    run there)."""

    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    record_replay: Callable[[dict[str, Any]], Any] | None = None
    on_batch: BatchFn | None = None


def local_services(
    config: RouterConfig, vectors: VectorTable, feeds: RunFeeds | None = None
) -> LocalServices:
    """Services for routing `config` in this process, over `vectors` and into `feeds`."""
    feeds = feeds or RunFeeds()
    batchers = Batchers()
    engines = local_engines(learned_families(config), vectors.embed, batchers, strict=True)
    services = PipelineServices(
        embed=vectors.embed,
        evaluators=engine_evaluators(dict(engines)),
        count_tokens=token_counter(),  # the exact count the Router uses (context signals, selectors)
        record_replay=feeds.record_replay,
        metrics=feeds.metrics,
    )
    return LocalServices(services, batchers.all)
