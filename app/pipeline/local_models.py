"""The learned signal families on engines in this process (app/runtime/local_engines.py): the
domain classifier (`HostedDomain`) and the guard's models (`HostedGuard`: PII, jailbreak,
harmful content), the same engines the DomainClassifier and Guard deployments host, without
the transport.

Two hosts use it. The Router deployment (`router_evaluators`) runs the heads on the
request's vector here (domain, jailbreak, harmful: small matrix products on the vector it
already holds) and the PII checks that need no NER (`PatternsHere`), so a request under the
shipped config makes no Ray call for its signals; the benchmark
(app/benchmark/local_services.py) runs every family here. Each model's calls go through a
MicroBatcher with no wait window: a lone request runs at once, and requests that arrive while
a call runs share the next one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.models.pii import NER_DERIVED_TYPES
from app.pipeline.signals.base import EmbedFn, EvaluatorFactory
from app.pipeline.signals.domain import domain_factory
from app.pipeline.signals.harmful import harmful_factory
from app.pipeline.signals.jailbreak import jailbreak_factory
from app.pipeline.signals.pii import pii_factory
from app.runtime.batching import MicroBatcher
from app.runtime.hosted import Batched, HostedDomain, Loaded
from app.runtime.hosted_guard import GUARD_FAMILIES, HostedGuard
from app.runtime.local_engines import BatchFn, LocalEngine, domain_engine, guard_engines
from app.runtime.signal_engine import SignalEngine, SignalItem, SignalRequest

# Rows per head call; the heads are matrix products, so a larger batch costs little more.
HEAD_BATCH_ITEMS = 64
# Admission is the host's job (Serve's max_ongoing_requests, a benchmark's own batch size).
UNBOUNDED = 1 << 40
# The families whose models are heads on the request's MiniLM vector.
VECTOR_HEAD_FAMILIES = frozenset({"domain", "jailbreak", "harmful"})
# The evaluator factory of each learned family, over the engine that serves it.
FAMILY_FACTORIES: dict[str, Callable[[SignalEngine | None], EvaluatorFactory]] = {
    "domain": domain_factory,
    "pii": pii_factory,
    "jailbreak": jailbreak_factory,
    "harmful": harmful_factory,
}


class ModelUnavailableError(ValueError):
    """A model the config's signals need could not be loaded in this process."""


def engine_evaluators(engines: dict[str, SignalEngine]) -> dict[str, EvaluatorFactory]:
    """The learned families' evaluator factories over the engines that serve them, by family:
    where a family runs is the engine it is given (PipelineServices.evaluators)."""
    return {family: FAMILY_FACTORIES[family](engine) for family, engine in engines.items()}


def _require(*models: Loaded[Any]) -> None:
    for model in models:
        if not model.loaded:
            raise ModelUnavailableError(f"{model.label} could not be loaded: {model.error}")


class Batchers:
    """The MicroBatchers of this process's engines (to close when the host ends); `batch` is
    the per-item call of a new one over a host's batch function."""

    def __init__(self) -> None:
        self.all: list[MicroBatcher[Any, Any]] = []

    def batch(self, fn: BatchFn) -> Batched:
        rows: MicroBatcher[Any, Any] = MicroBatcher(
            fn,
            window_ms=0.0,
            max_batch_items=HEAD_BATCH_ITEMS,
            max_queue=UNBOUNDED,
            max_queued_tokens=UNBOUNDED,
        )
        self.all.append(rows)
        return rows.submit


class PatternsHere:
    """The PII engine of a Router replica: requests asking for no NER type (a policy that allows
    every type NER produces, as the shipped config's; app/pipeline/signals/pii.py) run on a
    pattern-only detector in this process (Presidio's recognizers and the project rules, no
    spaCy), the others on `remote` (the Guard deployment)."""

    reads_vectors = False

    def __init__(self, remote: SignalEngine) -> None:
        self.guard = HostedGuard.load(use_ner=False, families=frozenset({"pii"}))
        self.local = guard_engines(self.guard, Batchers().batch)["pii"]
        self.remote = remote
        self.name = self.local.name

    def _engine(self, request: SignalRequest) -> SignalEngine:
        types = request.labels
        if not types or NER_DERIVED_TYPES & set(types) or not self.guard.pii.loaded:
            return self.remote
        return self.local

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        return await self._engine(request).classify(request)

    def failed(self, reason: str) -> Exception:
        return RuntimeError(reason)


def local_engines(
    families: frozenset[str], encode: EmbedFn, batchers: Batchers, *, strict: bool = False
) -> dict[str, LocalEngine]:
    """Engines for `families` over engine objects loaded here. `encode` embeds texts that come
    without a vector.

    strict: a model that fails to load raises ModelUnavailableError (a benchmark's figures
    must not silently measure the fallback); otherwise its calls raise ModelNotLoadedError,
    a signal error the decision's `on_error` handles, as in a live Router."""
    engines: dict[str, LocalEngine] = {}
    if "domain" in families:
        domain = HostedDomain.load(encode)
        if strict:
            _require(domain.loaded)
        engines["domain"] = domain_engine(domain, batchers.batch)
    guarded = families & GUARD_FAMILIES
    if not guarded:
        return engines
    # spaCy's NER and Presidio only when PII is judged here
    guard = HostedGuard.load(encode, use_ner="pii" in guarded, families=guarded)
    loaded: dict[str, Loaded[Any]] = {
        "pii": guard.pii,
        "jailbreak": guard.jailbreak,
        "harmful": guard.harmful,
    }
    for family, engine in guard_engines(guard, batchers.batch).items():
        if family in guarded:
            if strict:
                _require(loaded[family])
            engines[family] = engine
    return engines


def router_evaluators(embed: EmbedFn, remote_pii: SignalEngine | None) -> dict[str, EvaluatorFactory]:
    """What a Router replica evaluates itself: the heads on the request's vector, and the PII
    calls that need no NER (the others go to `remote_pii`, the Guard deployment)."""
    engines: dict[str, SignalEngine] = dict(local_engines(VECTOR_HEAD_FAMILIES, embed, Batchers()))
    if remote_pii is not None:
        engines["pii"] = PatternsHere(remote_pii)
    return engine_evaluators(engines)
