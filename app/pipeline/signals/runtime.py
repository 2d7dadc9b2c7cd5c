"""Routing signals placed on a model-runtime deployment (docs/model-runtime.md "Routing bindings").

A config that binds `domain_classifier`, `pii_classifier`, `prompt_guard`,
`fact_check_classifier`, `feedback_detector` or `modality_detector` to a `model_deployments` key
(`deployment`, optional `contract` and `head` in the module's own section under
`global.model_catalog`, app/config/model_deployments.py BINDINGS) has that family (for pii and
jailbreak: signals, the plugins and the global prompt guard) evaluated by that deployment's
workers instead of the graph's own engines. A per-rule binding (`safety.<rule>`,
`classifier.<rule>`) does so for one named signal rule only.

The families are the same classes the graph's engines serve (domain, pii, jailbreak, and the label
families through `EngineLabels`), each given a `WorkerEngine` (app/srun/worker_engine.py) in
place of the graph's engine: the binding is configuration, the family's code is one. What a
family reads from the worker's answer is app/runtime/signal_readers.py:
- `label_probabilities` (domain): the best label; the global threshold turns a weak one into
  `fallback_category`;
- `token_spans` (pii): spans -> entities; thresholds and `pii_types_allowed` as before;
- `label_scores` or `label_probabilities` (prompt_guard): the `head` label's score (default
  `jailbreak`) against the rule's threshold. A rule's `method` and pattern lists are the graph
  guard's; a bound deployment's score decides alone (for `vllm` rules too);
- `label_probabilities` or `label_scores` (fact_check, user_feedback, modality): each rule
  reads its own label's score against its threshold (a per-rule binding: its `head` label,
  default the rule's name).

Calls go through the host's `ManagedRuntimes.signal` (app/srun/hosting.py): deadline
`signal_timeout_ms`, else 45 s (the pipeline sees no request deadline). When no answer comes
or the input is read only in part, a safety signal (pii, jailbreak) is unscanned
(`UnscannedError`: `on_unscanned: block` matches, `allow` errors so on_error decides) and a
routing signal (domain) errors (on_error decides). Without a host (an offline preview) a bound
family errors.

The `embedding` binding is no family's engine but the semantic vector space: `bound_embedder`
gives the encoder the embedding rules and the response cache read (app/srun/worker_embedder.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.config.document import RouterConfig
from app.config.model_deployments import BINDINGS, on_unscanned_of, read_bindings
from app.pipeline.plan import SignalMatch
from app.pipeline.signals.base import SignalContext, SignalEvaluator, error_matches
from app.pipeline.signals.domain import DomainEvaluator
from app.pipeline.signals.jailbreak import JailbreakEvaluator
from app.pipeline.signals.labels import EngineLabels
from app.pipeline.signals.pii import PIIEvaluator
from app.srun.worker_embedder import WorkerEmbedder
from app.srun.worker_engine import WorkerEngine

if TYPE_CHECKING:  # the host type only: the pipeline need not import the supervisor
    from app.srun.hosting import ManagedRuntimes


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


EMBEDDING = "embedding"
_LABEL_RULES = {"fact_check": "fact_check", "user_feedback": "user_feedbacks", "modality": "modality"}


def _evaluator(
    config: RouterConfig, family: str, engine: WorkerEngine, head: str | None, per_rule: bool
) -> SignalEvaluator:
    if family == "domain":
        return DomainEvaluator.from_config(config, engine)
    if family == "pii":
        return PIIEvaluator.from_config(config, engine)
    if family == "jailbreak":  # the worker's score decides every rule, `vllm` ones too
        return JailbreakEvaluator.from_config(config, engine, judge=engine, head=head or "jailbreak")
    rules = getattr(config.routing.signals, _LABEL_RULES[family])
    return EngineLabels(family, rules, engine, per_rule, head)


def bound_evaluators(
    config: RouterConfig, host: ManagedRuntimes | None, base: Mapping[str, SignalEvaluator] | None = None
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
        if spec.family == EMBEDDING:  # a vector space, not a family's engine: bound_embedder
            continue
        unscanned = on_unscanned_of(catalog, name) if spec.safety else "block"
        contract = binding.contract or spec.contracts[0]
        engine = WorkerEngine(
            name,
            binding.deployment,
            host,
            contract,
            safety=spec.safety,
            unscanned=unscanned,
            labels=binding.labels,
        )
        head = binding.head or spec.head
        if name in rule_specs:
            rule = name.partition(".")[2]
            per_rule.setdefault(spec.family, {})[rule] = _evaluator(config, spec.family, engine, head, True)
        else:
            out[spec.family] = _evaluator(config, spec.family, engine, head, False)
    for family, bound in per_rule.items():
        out[family] = PerRule(family, out.get(family) or (base or {}).get(family), bound)
    return out


def bound_embedder(config: RouterConfig, host: ManagedRuntimes | None) -> WorkerEmbedder | None:
    """The encoder of the `embedding` binding (None: unbound, the graph's MiniLM serves): the
    embedding rules and the response cache read its vectors, the learned heads do not."""
    binding = read_bindings(config.global_.model_catalog).get(EMBEDDING)
    return WorkerEmbedder(binding.deployment, host) if binding is not None else None
