"""The in-process transport of the signal interface (app/runtime/signal_engine.py): `LocalEngine`
answers a family's `SignalRequest` from the engine objects loaded in this process, through the
graph's hosts (`HostedDomain`, `HostedGuard`: input checks, grouping by settings, load state).

The same objects serve three places: the Router's heads on its own vector (app/pipeline/
local_models.py, micro-batched), the benchmark, and the DomainClassifier and Guard deployments,
which hold a `LocalEngines` and expose its `classify(family, request)` to `HandleEngine` callers
(deployments/signal_engines.py, `@serve.batch` queues). `batch` wraps a host's batch function
into its per-item call, so the batching is the host's and the engine code is one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from app.runtime.hosted import Batched, HostedDomain
from app.runtime.hosted_guard import HostedGuard
from app.runtime.schemas import ModelNotLoadedError, Span
from app.runtime.signal_engine import SignalItem, SignalRequest, Verdict

# A host's batch function (items -> results) into the per-item call of its queue.
BatchFn = Callable[[list[Any]], Coroutine[Any, Any, list[Any]]]
Batch = Callable[[BatchFn], Batched]
Run = Callable[[SignalRequest], Awaitable[list[SignalItem]]]
# The graph's engines by family: (name in messages, reads the Router's vectors).
GRAPH_ENGINES: dict[str, tuple[str, bool]] = {
    "domain": ("domain classifier", True),
    "pii": ("PII detector", False),
    "jailbreak": ("jailbreak guard", True),
    "harmful": ("harmful-content classifier", True),
}


class LocalEngine:
    """One family's model in this process. A failed call raises the host's error (bad input:
    ValueError / TypeError; a model that did not load: ModelNotLoadedError)."""

    def __init__(self, name: str, reads_vectors: bool, run: Run) -> None:
        self.name = name
        self.reads_vectors = reads_vectors
        self._run = run

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        return await self._run(request)

    def failed(self, reason: str) -> Exception:
        return RuntimeError(reason)


def domain_engine(hosted: HostedDomain, batch: Batch) -> LocalEngine:
    """The domain head: label_probabilities (threshold and fallback are the family's)."""

    async def heads(items: list[Any]) -> list[Any]:
        return await asyncio.to_thread(hosted.head_batch, items)

    batched = batch(heads)

    async def run(request: SignalRequest) -> list[SignalItem]:
        results = await hosted.classify(request.texts, request.vectors, batched)
        return [
            SignalItem(label=r["category"], confidence=r["confidence"], probabilities=r["probabilities"])
            for r in results
        ]

    return LocalEngine(*GRAPH_ENGINES["domain"], run=run)


def guard_engines(hosted: HostedGuard, batch: Batch) -> dict[str, LocalEngine]:
    """The guard's models by family: pii (token spans), jailbreak (its score and verdict at the
    request's method, threshold and patterns), harmful (category probabilities and verdict)."""
    pii_one, jailbreak_one, harmful_one = (
        batch(hosted.pii_batch),
        batch(hosted.jailbreak_batch),
        batch(hosted.harmful_batch),
    )

    async def pii(request: SignalRequest) -> list[SignalItem]:
        results = await hosted.detect_pii(request.texts, request.labels, request.threshold, pii_one)
        return [SignalItem(spans=[_span(e) for e in r["entities"]]) for r in results]

    async def jailbreak(request: SignalRequest) -> list[SignalItem]:
        results = await hosted.detect_jailbreak(
            request.texts,
            request.vectors,
            request.method,
            request.threshold,
            request.patterns,
            request.benign_patterns,
            jailbreak_one,
        )
        return [
            SignalItem(
                scores={"jailbreak": r["score"]},
                verdict=Verdict(
                    flagged=r["is_jailbreak"],
                    score=r["score"],
                    confidence=r["confidence"],
                    method=r["method"],
                    patterns=r["patterns_detected"],
                    types=r["detection_types"],
                ),
            )
            for r in results
        ]

    async def harmful(request: SignalRequest) -> list[SignalItem]:
        results = await hosted.detect_harmful(
            request.texts, request.vectors, request.threshold, request.labels, harmful_one
        )
        return [
            SignalItem(
                label=r["category"],
                scores=r["categories"],
                verdict=Verdict(
                    flagged=r["is_harmful"],
                    score=r["score"],
                    confidence=r["confidence"],
                    method=None,
                    patterns=[],
                    types=r["detection_types"],
                ),
            )
            for r in results
        ]

    runs: dict[str, Run] = {"pii": pii, "jailbreak": jailbreak, "harmful": harmful}
    return {family: LocalEngine(*GRAPH_ENGINES[family], run=run) for family, run in runs.items()}


def _span(entity: dict[str, Any]) -> Span:
    return Span(
        label=entity["type"],
        start=entity["start"],
        end=entity["end"],
        text=entity["value"],
        probability=entity["confidence"],
    )


class LocalEngines:
    """The engines one process hosts, by family: what a model deployment serves to its callers."""

    def __init__(self, engines: Mapping[str, LocalEngine]) -> None:
        self.engines = dict(engines)

    async def classify(self, family: str, request: SignalRequest) -> list[SignalItem]:
        engine = self.engines.get(family)
        if engine is None:
            raise ModelNotLoadedError(f"no {family} model is hosted here")
        return await engine.classify(request)
