"""The one interface a learned signal family asks (docs/architecture.md, "Hosting a learned
signal"): `SignalEngine.classify(SignalRequest) -> list[SignalItem]`, one item per text.

A family (domain, pii, jailbreak, harmful, the label families) is written once against it; where
the model runs is the engine object the configuration places there, never the family's code:

- in process: `LocalEngine` (app/runtime/local_engines.py) over the engine objects loaded in
  this process (the Router's heads on its own vector, the benchmark, the graph's deployments);
- a remote engine: by Ray handle (`HandleEngine`, deployments/signal_engines.py, to the
  DomainClassifier and Guard deployments, which host a `LocalEngines` each) or by svc-srun
  socket (`WorkerEngine`, app/srun/worker_engine.py, for `model_deployments` bindings);
- an LLM asked over the upstream client (`JudgeEngine`, app/pipeline/signals/llm_judge.py).

The request carries what the family reads: its texts, and the Router's vectors of them when the
caller already holds them (only an engine on that vector space, `reads_vectors`, uses them; a
worker encodes on its side). The answer carries labels and scores in the worker API's answer
types (label_probabilities: `label`, `confidence`, `probabilities`; label_scores: `scores`;
token_spans: `spans`) and each item's own error. An engine that judges at the request's
threshold itself (the graph's guards, an LLM guard) adds its `verdict`. Reading an answer into a
family's result is app/runtime/signal_readers.py, shared by the families and the diagnostics.

A whole call that fails raises (ModelNotLoadedError, ValueError, ...); `failed(reason)` is how an
answer the family cannot use resolves where the engine is placed: a plain error in the graph, a
safety binding's `UnscannedError` (on_unscanned) on svc-srun workers.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.runtime.schemas import ItemResult


class SignalRequest(BaseModel):
    """What a family asks about its texts. `threshold`, `labels` and the jailbreak settings are
    honoured by the engines that use them and ignored by the others (a worker answers scores
    and the family applies the threshold)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    texts: list[str]
    # The caller's vectors of `texts` (n, dim), when it holds them: one encoder pass per request.
    vectors: np.ndarray | None = None
    # The cut of an engine that judges (a guard's operating point); None: the engine's own.
    threshold: float | None = None
    # The labels asked for (PII entity types, harm categories); None: every label.
    labels: list[str] | None = None
    # The graph jailbreak guard's method and pattern lists (app/models/jailbreak.py).
    method: str = "classifier"
    patterns: list[str] = Field(default_factory=list)
    benign_patterns: list[str] = Field(default_factory=list)


class Verdict(BaseModel):
    """An engine's own judgment at the request's threshold: flagged or not, its risk score and
    confidence in the verdict, and why (`method`, the `patterns` matched, detection `types`)."""

    flagged: bool
    score: float
    confidence: float
    method: str | None = None
    patterns: list[str] = Field(default_factory=list)
    types: list[str] = Field(default_factory=list)


class SignalItem(ItemResult):
    """One text's answer: the worker API's answer item (the fields of its answer type, or
    `error`: that text alone failed) and, from an engine that judges, its `verdict`."""

    index: int = 0
    verdict: Verdict | None = None

    def label_scores(self) -> dict[str, float] | None:
        """Score by label, whichever answer type carries them (scores, else probabilities)."""
        return self.scores if self.scores is not None else self.probabilities


@runtime_checkable
class SignalEngine(Protocol):
    """Where a learned signal's answers come from. `name` names it in messages; `reads_vectors`:
    it runs on the Router's vector space, so the family hands it the request's query vector."""

    name: str
    reads_vectors: bool

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        """One item per text of `request`, in order; raises when the whole call fails."""
        ...

    def failed(self, reason: str) -> Exception:
        """The exception an unusable answer of this engine resolves to."""
        ...


class UnscannedError(Exception):
    """A safety signal's model did not read the input in full (its model runtime failed, missed
    the signal deadline, or read only part). `matches`: how the rule resolves, from
    `on_unscanned` (docs/security.md): `block` -> it matches; `allow` -> it errors, and on_error decides."""

    def __init__(self, reason: str, matches: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.matches = matches


class UnavailableEngine:
    """A placement that cannot answer (no host for a binding, no LLM for `use_vllm`): every call
    raises `reason`, a signal error the rule's on_error handles."""

    reads_vectors = False

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        raise RuntimeError(self.reason)

    def failed(self, reason: str) -> Exception:
        return RuntimeError(reason)


def checked(engine: SignalEngine, items: Any, n: int) -> list[SignalItem]:
    """`items` when it is one answered SignalItem per text; else (a count that does not match,
    an item's own error) the engine's failure: a family reads all of its texts or none."""
    if not isinstance(items, list) or len(items) != n:
        count = len(items) if isinstance(items, list) else type(items).__name__
        raise engine.failed(f"answer without one result per input ({count} for {n})")
    for item in items:
        if item.error is not None:
            raise engine.failed(f"item error {item.error.model_dump()}")
    return items
