"""Routing signals evaluated by a model-runtime deployment (spec 2 bindings).

A config that binds `domain_classifier`, `pii_classifier` or `prompt_guard` to a
`model_deployments` key (`deployment`, optional `contract` and `head` in the module's own
section under `global.model_catalog`, app/srun/settings.py BINDINGS) has the `domain`, `pii` or
`jailbreak` family (signals, the `pii` / `jailbreak` plugins and the global prompt guard)
evaluated by that deployment's worker over /v1/classify instead of the graph's own models.

The worker's answers are read into the shapes the evaluators already judge:
- `label_probabilities` (domain): {label, confidence, probabilities} -> DomainResult, the
  global threshold turning a weak best label into `fallback_category`;
- `token_spans` (pii): spans {label, start, end, text, probability} -> PIIResult entities;
- `label_scores` or `label_probabilities` (prompt_guard): the `head` label's score (default
  `jailbreak`) against the rule's threshold -> JailbreakResult. A rule's `method` and pattern
  lists are the graph guard's; a bound deployment's score decides alone.

Calls go through a `SignalHost` (app/srun/hosting.py ManagedRuntimes): deadline
`signal_timeout_ms`, else 45 s (the pipeline sees no request deadline). When no answer comes
or the input is read only in part, a safety signal (pii, jailbreak) is unscanned
(`UnscannedError`: `on_unscanned: block` matches, `allow` errors so on_error decides) and a
routing signal (domain) errors (on_error decides). Without a host (an offline preview) a bound
family errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from app.config.model_deployments import BINDINGS, ModelBinding, OnUnscanned, on_unscanned_of, read_bindings
from app.config.models import RouterConfig
from app.models.pii import PIIEntity, PIIResult, mask
from app.pipeline.signals.base import SignalEvaluator, UnscannedError
from app.pipeline.signals.domain import DomainEvaluator
from app.pipeline.signals.jailbreak import JailbreakEvaluator
from app.pipeline.signals.pii import PIIEvaluator


class SignalHost(Protocol):
    """What a binding calls: `ManagedRuntimes.signal` (returns a SignalResult)."""

    async def signal(
        self,
        deployment: str,
        surface: str,
        body: dict[str, Any],
        remaining_s: float | None,
        *,
        safety: bool = False,
        on_error_matches: bool = False,
        unscanned: OnUnscanned = "block",
    ) -> Any: ...


class RuntimeBinding:
    """One binding's classify call through its host, and how a failure resolves."""

    def __init__(
        self, name: str, binding: ModelBinding, host: SignalHost | None, unscanned: OnUnscanned
    ) -> None:
        spec = BINDINGS[name]
        self.name = name
        self.deployment = binding.deployment
        self.contract = binding.contract or spec.contracts[0]
        self.head = binding.head or spec.head
        self.safety = spec.safety
        self.unscanned = unscanned
        self.host = host

    def _failed(self, reason: str) -> Exception:
        """A call that gave no usable answer: unscanned for a safety signal, else an error."""
        where = f"{self.name} ({self.deployment}): {reason}"
        if self.safety:
            return UnscannedError(where, matches=self.unscanned == "block")
        return RuntimeError(where)

    async def classify(self, texts: list[str]) -> list[dict[str, Any]]:
        """One result item per text, in order."""
        if self.host is None:
            raise RuntimeError(f"{self.name} ({self.deployment}): no model runtime host")
        result = await self.host.signal(
            self.deployment, "classify", {"input": texts}, None, safety=self.safety, unscanned=self.unscanned
        )
        if result.state == "unscanned":
            raise UnscannedError(
                f"{self.name} ({self.deployment}): {result.error}", matches=bool(result.matches)
            )
        if result.state != "ok":
            raise RuntimeError(f"{self.name} ({self.deployment}): {result.error}")
        items = (result.answer or {}).get("results")
        if not isinstance(items, list) or len(items) != len(texts):
            raise self._failed("answer without one result per input")
        for item in items:
            if not isinstance(item, dict) or item.get("error"):
                detail = item.get("error") if isinstance(item, dict) else item
                raise self._failed(f"item error {detail}")
        return sorted(items, key=lambda item: int(item.get("index", 0)))

    # -- readers of each contract ------------------------------------------------------------

    async def domain(
        self, texts: list[str], vectors: np.ndarray | None, threshold: float | None, fallback: str
    ) -> list[dict[str, Any]]:
        out = []
        for text, item in zip(texts, await self.classify(texts), strict=True):
            probabilities = {str(k): float(v) for k, v in (item.get("probabilities") or {}).items()}
            if not probabilities:
                raise self._failed("no label probabilities in the answer")
            label = str(item.get("label") or max(probabilities, key=probabilities.__getitem__))
            confidence = float(item.get("confidence", probabilities.get(label, 0.0)))
            weak = threshold is not None and confidence < threshold
            out.append(
                {
                    "category": fallback if weak or not text.strip() else label,
                    "confidence": confidence,
                    "probabilities": probabilities,
                }
            )
        return out

    async def pii(
        self, texts: list[str], entity_types: list[str] | None, threshold: float | None
    ) -> list[dict[str, Any]]:
        out = []
        for text, item in zip(texts, await self.classify(texts), strict=True):
            spans = item.get("spans")
            if not isinstance(spans, list):
                raise self._failed("no spans in the answer")
            entities = [
                PIIEntity(
                    type=str(s["label"]),
                    value=str(s.get("text", "")),
                    confidence=float(s["probability"]),
                    start=int(s["start"]),
                    end=int(s["end"]),
                    masked_value=f"<{s['label']}>",
                )
                for s in spans
                if (threshold is None or float(s["probability"]) >= threshold)
                and (not entity_types or s["label"] in entity_types)
            ]
            out.append(
                PIIResult(
                    has_pii=bool(entities), entities=entities, masked_text=mask(text, entities)
                ).model_dump()
            )
        return out

    async def jailbreak(
        self,
        texts: list[str],
        vectors: np.ndarray | None,
        method: str,
        threshold: float,
        patterns: Sequence[str],
        benign: Sequence[str],
    ) -> list[dict[str, Any]]:
        field = "scores" if self.contract == "label_scores" else "probabilities"
        out = []
        for item in await self.classify(texts):
            scores = item.get(field)
            if not isinstance(scores, dict) or self.head not in scores:
                raise self._failed(f"no {field} for head {self.head!r} in the answer")
            score = min(1.0, max(0.0, float(scores[self.head])))
            flagged = score >= threshold
            out.append(
                {
                    "is_jailbreak": flagged,
                    "score": score,
                    "confidence": score if flagged else 1.0 - score,
                    "method": "classifier",
                    "patterns_detected": [],
                    "detection_types": [str(self.head)] if flagged else [],
                }
            )
        return out


def bound_evaluators(config: RouterConfig, host: SignalHost | None) -> dict[str, SignalEvaluator]:
    """The evaluators of the families `config` binds to model-runtime deployments, by family;
    they replace the graph's own (PipelineServices.evaluators) for this config."""
    catalog = config.global_.model_catalog
    out: dict[str, SignalEvaluator] = {}
    for name, binding in read_bindings(catalog).items():
        spec = BINDINGS[name]
        runtime = RuntimeBinding(
            name, binding, host, on_unscanned_of(catalog, name) if spec.safety else "block"
        )
        if spec.family == "domain":
            out["domain"] = DomainEvaluator.from_config(config, runtime.domain, uses_vectors=False)
        elif spec.family == "pii":
            out["pii"] = PIIEvaluator.from_config(config, runtime.pii)
        else:
            out["jailbreak"] = JailbreakEvaluator.from_config(config, runtime.jailbreak, uses_vectors=False)
    return out
