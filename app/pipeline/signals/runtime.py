"""Routing signals evaluated by a model-runtime deployment (docs/model-runtime.md "Routing bindings").

A config that binds `domain_classifier`, `pii_classifier`, `prompt_guard`,
`fact_check_classifier`, `feedback_detector` or `modality_detector` to a `model_deployments` key
(`deployment`, optional `contract` and `head` in the module's own section under
`global.model_catalog`, app/config/model_deployments.py BINDINGS) has that family (for pii and
jailbreak: signals, the plugins and the global prompt guard) evaluated by that deployment's
worker over /v1/classify instead of the graph's own models. A per-rule binding
(`safety.<rule>`, `classifier.<rule>`) does so for one named signal rule only.

The worker's answers are read into the shapes the evaluators already judge:
- `label_probabilities` (domain): {label, confidence, probabilities} -> DomainResult, the
  global threshold turning a weak best label into `fallback_category`;
- `token_spans` (pii): spans {label, start, end, text, probability} -> PIIResult entities;
- `label_scores` or `label_probabilities` (prompt_guard): the `head` label's score (default
  `jailbreak`) against the rule's threshold -> JailbreakResult. A rule's `method` and pattern
  lists are the graph guard's; a bound deployment's score decides alone.
- `label_probabilities` or `label_scores` (fact_check, user_feedback, modality): each rule
  reads its own label's score against its threshold (a per-rule binding: its `head` label,
  default the rule's name).

Calls go through a `SignalHost` (app/srun/hosting.py ManagedRuntimes): deadline
`signal_timeout_ms`, else 45 s (the pipeline sees no request deadline). When no answer comes
or the input is read only in part, a safety signal (pii, jailbreak) is unscanned
(`UnscannedError`: `on_unscanned: block` matches, `allow` errors so on_error decides) and a
routing signal (domain) errors (on_error decides). Without a host (an offline preview) a bound
family errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from app.config.document import RouterConfig
from app.config.model_deployments import (
    BINDINGS,
    BindingSpec,
    ModelBinding,
    OnUnscanned,
    on_unscanned_of,
    read_bindings,
)
from app.models.pii import PIIEntity, PIIResult, mask
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext, SignalEvaluator, UnscannedError, error_matches
from app.pipeline.signals.domain import DomainEvaluator
from app.pipeline.signals.jailbreak import JailbreakEvaluator
from app.pipeline.signals.labels import LabelFamily
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
        self,
        name: str,
        binding: ModelBinding,
        host: SignalHost | None,
        unscanned: OnUnscanned,
        spec: BindingSpec | None = None,
    ) -> None:
        spec = spec or BINDINGS[name]
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

    async def labels(self, text: str) -> dict[str, float]:
        """Score by label of one text (`label_probabilities` or `label_scores`); with a head
        (a per-rule binding), that label's score as the rule's own."""
        field = "scores" if self.contract == "label_scores" else "probabilities"
        scores = (await self.classify([text]))[0].get(field)
        if not isinstance(scores, dict) or not scores:
            raise self._failed(f"no {field} in the answer")
        return {str(k): min(1.0, max(0.0, float(v))) for k, v in scores.items()}


class RuntimeLabels(LabelFamily):
    """A label family (fact_check, user_feedback, modality) judged by a deployment: each rule
    reads the score of its own label (per-rule bindings: of `head`, default the rule's name)."""

    def __init__(self, family: str, rules: Sequence[Any], runtime: RuntimeBinding, per_rule: bool) -> None:
        super().__init__(rules)
        self.family = family
        self.runtime = runtime
        self.per_rule = per_rule

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        if not ctx.text.strip():
            return {}, {"reason": "no user text"}
        scores = await self.runtime.labels(ctx.text)
        if self.per_rule:
            scores = {name: scores.get(self.runtime.head or name, 0.0) for name in self._rules}
        detail = {
            "deployment": self.runtime.deployment,
            "scores": {k: round(v, 4) for k, v in scores.items()},
        }
        return scores, detail


class PerRule:
    """A family whose named rules are evaluated by their own bindings, the rest by `base`
    (None: the family has no evaluator here; its unbound rules err)."""

    def __init__(self, family: str, base: SignalEvaluator | None, bound: dict[str, SignalEvaluator]) -> None:
        self.family = family
        self.base = base
        self.bound = bound

    def rule_names(self) -> list[str]:
        names = self.base.rule_names() if self.base is not None else []
        return names + [n for n in self.bound if n not in names]

    async def warm_up(self) -> None:
        if self.base is not None:
            await self.base.warm_up()

    async def evaluate_rules(self, ctx: SignalContext, rules: list[Any]) -> list[SignalMatch]:
        """Plugin and global guard rules (not named signals) stay with the family's evaluator."""
        run = getattr(self.base, "evaluate_rules", None)
        if run is None:
            raise RuntimeError(f"no {self.family} evaluator to run the guard")
        return list(await run(ctx, rules))

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        rest = frozenset(n for n in names if n not in self.bound)
        out = []
        if rest and self.base is None:
            out = error_matches(self.family, rest, f"no evaluator for signal type {self.family!r}")
        parts = [self.base.evaluate(ctx, rest)] if rest and self.base is not None else []
        parts += [self.bound[n].evaluate(ctx, frozenset({n})) for n in sorted(names - rest)]
        return out + [match for found in await asyncio.gather(*parts) for match in found]


_LABEL_RULES = {"fact_check": "fact_check", "user_feedback": "user_feedbacks", "modality": "modality"}


def _evaluator(config: RouterConfig, family: str, runtime: RuntimeBinding, per_rule: bool) -> SignalEvaluator:
    if family == "domain":
        return DomainEvaluator.from_config(config, runtime.domain, uses_vectors=False)
    if family == "pii":
        return PIIEvaluator.from_config(config, runtime.pii)
    if family == "jailbreak":
        return JailbreakEvaluator.from_config(config, runtime.jailbreak, uses_vectors=False)
    rules = getattr(config.routing.signals, _LABEL_RULES[family])
    return RuntimeLabels(family, rules, runtime, per_rule)


def bound_evaluators(
    config: RouterConfig, host: SignalHost | None, base: Mapping[str, SignalEvaluator] | None = None
) -> dict[str, SignalEvaluator]:
    """The evaluators of the families `config` binds to model-runtime deployments, by family;
    they replace the graph's own (`base`, PipelineServices.evaluators) for this config. A
    per-rule binding evaluates its rule only; the family's other rules stay with the family's
    evaluator (bound or the graph's)."""
    catalog = config.global_.model_catalog
    rule_specs = config.rule_binding_specs()
    out: dict[str, SignalEvaluator] = {}
    per_rule: dict[str, dict[str, SignalEvaluator]] = {}
    for name, binding in read_bindings(catalog).items():
        spec = rule_specs.get(name) or BINDINGS[name]
        unscanned = on_unscanned_of(catalog, name) if spec.safety else "block"
        runtime = RuntimeBinding(name, binding, host, unscanned, spec)
        if name in rule_specs:
            rule = name.partition(".")[2]
            per_rule.setdefault(spec.family, {})[rule] = _evaluator(config, spec.family, runtime, True)
        else:
            out[spec.family] = _evaluator(config, spec.family, runtime, False)
    for family, bound in per_rule.items():
        out[family] = PerRule(family, out.get(family) or (base or {}).get(family), bound)
    return out
