"""The learned signal families over engine objects in this process: the domain classifier
(`HostedDomain`) and the guard's models (`HostedGuard`: PII, jailbreak, harmful content),
wired as deployments/router.py's `classifier_evaluators` wires them over DeploymentHandles,
without the transport.

Two hosts use it. The Router deployment (`router_evaluators`) runs the heads on the
request's vector here (domain, jailbreak, harmful: small matrix products on the vector it
already holds) and the PII checks that need no NER (`patterns_here`), so a request under the
shipped config makes no Ray call for its signals; the benchmark
(app/benchmark/local_services.py) runs every family here. Each model's calls go through a
MicroBatcher with no wait window: a lone request runs at once, and requests that arrive while
a call runs share the next one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from app.models.pii import NER_DERIVED_TYPES
from app.pipeline.signals.base import EmbedFn, EvaluatorFactory
from app.pipeline.signals.domain import domain_factory
from app.pipeline.signals.harmful import harmful_factory
from app.pipeline.signals.jailbreak import jailbreak_factory
from app.pipeline.signals.pii import PIIDetectFn, pii_factory
from app.runtime.batching import MicroBatcher
from app.runtime.hosted import HostedDomain, Loaded
from app.runtime.hosted_guard import GUARD_FAMILIES, HostedGuard

# Rows per head call; the heads are matrix products, so a larger batch costs little more.
HEAD_BATCH_ITEMS = 64
# Admission is the host's job (Serve's max_ongoing_requests, a benchmark's own batch size).
UNBOUNDED = 1 << 40
# The families whose models are heads on the request's MiniLM vector.
VECTOR_HEAD_FAMILIES = frozenset({"domain", "jailbreak", "harmful"})


class ModelUnavailableError(ValueError):
    """A model the config's signals need could not be loaded in this process."""


def _require(*models: Loaded[Any]) -> None:
    for model in models:
        if not model.loaded:
            raise ModelUnavailableError(f"{model.label} could not be loaded: {model.error}")


def _batcher(fn: Callable[[list[Any]], Any]) -> MicroBatcher[Any, Any]:
    return MicroBatcher(
        fn, window_ms=0.0, max_batch_items=HEAD_BATCH_ITEMS, max_queue=UNBOUNDED, max_queued_tokens=UNBOUNDED
    )


def _hosted(
    method: Callable[..., Awaitable[list[Any]]],
    batch: Callable[[list[Any]], Any],
    batchers: list[MicroBatcher[Any, Any]],
) -> Callable[..., Awaitable[list[Any]]]:
    """A host's method as the family's detect callable, its rows through a new batcher: the
    same arguments as the deployment's method of that name (deployments/router.py `_retried`)."""
    rows = _batcher(batch)
    batchers.append(rows)

    async def call(*args: Any) -> list[Any]:
        return await method(*args, rows.submit)

    return call


def patterns_here(remote: PIIDetectFn) -> PIIDetectFn:
    """A PII detect function that runs calls asking for no NER type (a policy that allows every
    type NER produces, as the shipped config's; app/pipeline/signals/pii.py) on a pattern-only
    detector in this process (Presidio's recognizers and the project rules, no spaCy), and the
    calls that need NER over `remote` (the Guard deployment)."""
    guard = HostedGuard.load(use_ner=False, families=frozenset({"pii"}))
    local = _hosted(guard.detect_pii, guard.pii_batch, [])

    async def detect_pii(
        texts: list[str], entity_types: list[str] | None, threshold: float | None
    ) -> list[Any]:
        if not entity_types or NER_DERIVED_TYPES & set(entity_types) or not guard.pii.loaded:
            return await remote(texts, entity_types, threshold)
        return await local(texts, entity_types, threshold)

    return detect_pii


def local_evaluators(
    families: frozenset[str], encode: EmbedFn, *, strict: bool = False
) -> tuple[dict[str, EvaluatorFactory], list[MicroBatcher[Any, Any]]]:
    """Evaluator factories for `families` over engine objects loaded here, and their batchers
    (to close when the host ends). `encode` embeds texts that come without a vector.

    strict: a model that fails to load raises ModelUnavailableError (a benchmark's figures
    must not silently measure the fallback); otherwise its calls raise ModelNotLoadedError,
    a signal error the decision's `on_error` handles, as in a live Router."""
    evaluators: dict[str, EvaluatorFactory] = {}
    batchers: list[MicroBatcher[Any, Any]] = []
    if "domain" in families:
        domain = HostedDomain.load(encode)
        if strict:
            _require(domain.loaded)
        evaluators["domain"] = domain_factory(_hosted(domain.classify, domain.head_batch, batchers))
    guarded = families & GUARD_FAMILIES
    if not guarded:
        return evaluators, batchers
    # spaCy's NER and Presidio only when PII is judged here
    guard = HostedGuard.load(encode, use_ner="pii" in guarded, families=guarded)
    hosted: dict[str, tuple[Any, Loaded[Any], Any, Any]] = {  # factory, model, method, batch
        "pii": (pii_factory, guard.pii, guard.detect_pii, guard.pii_batch),
        "jailbreak": (jailbreak_factory, guard.jailbreak, guard.detect_jailbreak, guard.jailbreak_batch),
        "harmful": (harmful_factory, guard.harmful, guard.detect_harmful, guard.harmful_batch),
    }
    for family in sorted(guarded):
        factory, loaded, method, batch = hosted[family]
        if strict:
            _require(loaded)
        evaluators[family] = factory(_hosted(method, batch, batchers))
    return evaluators, batchers


def router_evaluators(embed: EmbedFn, remote_pii: PIIDetectFn | None) -> dict[str, EvaluatorFactory]:
    """What a Router replica evaluates itself: the heads on the request's vector, and the PII
    calls that need no NER (the others go to `remote_pii`, the Guard deployment)."""
    evaluators, _ = local_evaluators(VECTOR_HEAD_FAMILIES, embed)
    if remote_pii is not None:
        evaluators["pii"] = pii_factory(patterns_here(remote_pii))
    return evaluators
