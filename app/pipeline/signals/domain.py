"""Domain signals: `routing.signals.domains[]`, judged by the 14-category domain classifier.

One classification per request: the human's ask, with the request's shared query
embedding (`SignalContext.query_vector`, the one encoder pass) handed to an engine on the
Router's vector space so it does not encode again. The global threshold
(`global.model_catalog.modules.classifier.domain.threshold`) applies to whatever answered: a
best probability below it turns the category into `fallback_category` (default `other`;
app/runtime/signal_readers.py `domain_result`).

A rule matches when the category is one of its `mmlu_categories`, or, for a rule with no
list, when the category equals its name case-insensitively (the spec's mapping rule);
a rule's own `threshold` additionally requires that much probability. Confidence: the
classification confidence when matched; otherwise the best probability among the rule's
categories (so `NOT` and previews see how close it was).

The classifier is a `SignalEngine` (app/runtime/signal_engine.py): the head in the Router,
the DomainClassifier deployment, a `model_deployments` binding's workers, or the
classification LLM (`classifier.domain.use_vllm`); tests pass a fake.
"""

from __future__ import annotations

from typing import Any

from app.config.binding_checks import DEFAULT_FALLBACK, domain_fallback
from app.config.document import RouterConfig
from app.config.signals import DomainSignal
from app.models.domain import DomainResult, map_to_configured
from app.pipeline.plan import SignalMatch
from app.pipeline.signals import llm_judge
from app.pipeline.signals.base import EvaluatorFactory, SignalContext, error_matches, request_vectors
from app.runtime.signal_engine import SignalEngine, SignalRequest, UnavailableEngine, checked
from app.runtime.signal_readers import UnusableAnswer, domain_result

FAMILY = "domain"


def catalog_section(config: RouterConfig, *keys: str) -> dict[str, Any]:
    """`global.model_catalog.<keys...>` as a dict ({} when absent or not a mapping)."""
    node: Any = config.global_.model_catalog
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def unit_float(value: Any) -> float | None:
    """A threshold from an opaque config section: a number in [0, 1], else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0.0 <= float(value) <= 1.0 else None


def domain_settings(config: RouterConfig) -> tuple[float | None, str]:
    """(threshold, fallback_category) of `global.model_catalog.modules.classifier.domain`."""
    section = catalog_section(config, "modules", "classifier", "domain")
    return unit_float(section.get("threshold")), domain_fallback(config.global_.model_catalog)


def rule_categories(rule: DomainSignal) -> frozenset[str]:
    """Lower-cased classifier categories a rule accepts."""
    return rule.categories()


class DomainEvaluator:
    family = FAMILY

    def __init__(
        self,
        rules: list[DomainSignal],
        engine: SignalEngine | None,
        threshold: float | None = None,
        fallback_category: str = DEFAULT_FALLBACK,
    ) -> None:
        self._rules = {rule.name: rule for rule in rules}
        self.engine = engine
        self.threshold = threshold
        self.fallback_category = fallback_category
        self._mapping = [(rule.name, list(rule.mmlu_categories)) for rule in rules]

    @classmethod
    def from_config(cls, config: RouterConfig, engine: SignalEngine | None) -> DomainEvaluator:
        threshold, fallback = domain_settings(config)
        return cls(config.routing.signals.domains, engine, threshold, fallback)

    def rule_names(self) -> list[str]:
        return list(self._rules)

    async def warm_up(self) -> None:
        return None  # the engine's host loads and warms it

    def configured_category(self, category: str) -> str:
        return map_to_configured(category, self._mapping)

    async def classify(self, ctx: SignalContext, text: str | None = None) -> DomainResult:
        """The classification of `text` (default the human's ask)."""
        engine = self.engine
        if engine is None:
            raise RuntimeError("no domain classifier configured")
        text = ctx.text if text is None else text
        request = SignalRequest(texts=[text], vectors=await request_vectors(engine, ctx, text))
        (item,) = checked(engine, await engine.classify(request), 1)
        try:
            return domain_result(item, text, self.threshold, self.fallback_category)
        except UnusableAnswer as exc:
            raise engine.failed(str(exc)) from None

    async def evaluate(self, ctx: SignalContext, names: frozenset[str]) -> list[SignalMatch]:
        known = frozenset(n for n in names if n in self._rules)
        out = [
            SignalMatch(
                type=FAMILY, name=n, matched=False, confidence=0.0, error=f"no domain rule named {n!r}"
            )
            for n in sorted(names - known)
        ]
        if not known:
            return out
        if not ctx.text.strip():
            return out + [
                SignalMatch(
                    type=FAMILY, name=n, matched=False, confidence=0.0, detail={"reason": "no user text"}
                )
                for n in sorted(known)
            ]
        found: list[SignalMatch] = []
        by_text: dict[str, list[str]] = {}
        for name in sorted(known):  # one classification per distinct text the rules read
            by_text.setdefault(ctx.whole_text_for(self._rules[name].read), []).append(name)
        for text, group in by_text.items():
            try:
                result = await self.classify(ctx, text)
            except Exception as exc:  # a model failure is a signal error (on_error decides), not a 500
                found += error_matches(FAMILY, set(group), f"domain classification failed: {exc}")
                continue
            top = sorted(result.probabilities.items(), key=lambda kv: kv[1], reverse=True)[:3]
            shared = {
                "category": result.category,
                "configured_category": self.configured_category(result.category),
                "top": [{"category": c, "probability": round(p, 4)} for c, p in top],
            }
            found += [self._judge(self._rules[name], result, shared) for name in group]
        return out + sorted(found, key=lambda m: m.name)

    @staticmethod
    def _judge(rule: DomainSignal, result: DomainResult, shared: dict[str, Any]) -> SignalMatch:
        accepted = rule_categories(rule)
        probabilities = {c.lower(): p for c, p in result.probabilities.items()}
        matched = result.category.strip().lower() in accepted
        if matched and rule.threshold is not None and result.confidence < rule.threshold:
            matched = False
        if matched:
            confidence = result.confidence
        else:
            confidence = max((probabilities.get(c, 0.0) for c in accepted), default=0.0)
        detail = {**shared, "probability": round(float(confidence), 4)}
        return SignalMatch(
            type=FAMILY,
            name=rule.name,
            matched=matched,
            confidence=max(0.0, min(1.0, float(confidence))),
            detail=detail,
        )


def domain_factory(engine: SignalEngine | None) -> EvaluatorFactory:
    """`PipelineServices.evaluators["domain"]` entry over the graph's domain engine; with
    `classifier.domain.use_vllm` the classification LLM answers instead."""

    def factory(config: RouterConfig, services: Any = None) -> DomainEvaluator:
        if catalog_section(config, "modules", "classifier", "domain").get("use_vllm") is True:
            return DomainEvaluator.from_config(config, llm_classifier(config, services))
        return DomainEvaluator.from_config(config, engine)

    return factory


def llm_classifier(config: RouterConfig, services: Any) -> SignalEngine:
    """The classification LLM as the domain engine: it picks among the categories the domain
    rules accept."""
    labels = sorted({c for rule in config.routing.signals.domains for c in rule_categories(rule)})
    judge = llm_judge.build_judge(config, "classification", getattr(services, "llm_client", None))
    if judge is None:
        return UnavailableEngine(
            "classification LLM",
            "use_vllm needs an external model with model_role classification (global.model_catalog.external)",
        )
    return llm_judge.JudgeEngine(judge, labels=labels)
