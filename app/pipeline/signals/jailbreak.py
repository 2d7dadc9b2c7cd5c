"""Jailbreak signals: `routing.signals.jailbreak[]`, the `jailbreak` decision plugin and the
global prompt guard (`global.model_catalog.modules.prompt_guard`).

A rule `{name, method, threshold, include_history, jailbreak_patterns, benign_patterns}`
matches when the guard flags the text (`is_jailbreak`: score >= threshold). The text is
the human's ask, or with `include_history` the conversation text as paragraphs
(app/common/chat_text.py: every user turn, so an attack split over turns is seen whole).
For the ask the request's shared query embedding is passed along, so the guard does not
encode it again; history texts are encoded by the guard's side. Confidence is the guard's
risk score, also when not matched (so `NOT` works).

A rule that leaves `threshold` unset takes `prompt_guard.threshold` when configured.
The guard arrives as an async callable (`JailbreakDetectFn`): the Router adapts the Guard
deployment handle to it, tests pass a fake.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from app.config.models import RouterConfig
from app.config.signals import JailbreakSignal
from app.models.jailbreak import JailbreakResult
from app.pipeline.signals import llm_judge
from app.pipeline.signals.base import EvaluatorFactory
from app.pipeline.signals.domain import catalog_section, unit_float
from app.pipeline.signals.guarded import TextRuleEvaluator

FAMILY = "jailbreak"
PROMPT_GUARD_RULE = "global:prompt_guard"

# (texts, vectors or None, method, threshold, jailbreak_patterns, benign_patterns) -> results
JailbreakDetectFn = Callable[
    [list[str], np.ndarray | None, str, float, list[str], list[str]], Awaitable[list[Any]]
]


def prompt_guard_settings(config: RouterConfig) -> dict[str, Any]:
    return catalog_section(config, "modules", "prompt_guard")


def prompt_guard_rule(config: RouterConfig) -> JailbreakSignal | None:
    """The global guard as a rule, when `prompt_guard.enabled` (every auto request is checked)."""
    section = prompt_guard_settings(config)
    if section.get("enabled") is not True:
        return None
    fields: dict[str, Any] = {"name": PROMPT_GUARD_RULE}
    threshold = unit_float(section.get("threshold"))
    if threshold is not None:
        fields["threshold"] = threshold
    if section.get("method") in ("classifier", "contrastive", "hybrid"):
        fields["method"] = section["method"]
    if section.get("use_vllm") is True:  # the reference key: the guardrail external model judges
        fields["method"] = llm_judge.METHOD
    if isinstance(section.get("include_history"), bool):
        fields["include_history"] = section["include_history"]
    if isinstance(section.get("read"), list):
        fields["read"] = section["read"]
    if isinstance(section.get("cascade_band"), list):
        fields["cascade_band"] = section["cascade_band"]
    return JailbreakSignal(**fields)


class JailbreakEvaluator(TextRuleEvaluator[JailbreakSignal]):
    family = FAMILY
    detector = "jailbreak guard"

    @classmethod
    def from_config(
        cls, config: RouterConfig, detect: JailbreakDetectFn | None, uses_vectors: bool = True
    ) -> JailbreakEvaluator:
        threshold = unit_float(prompt_guard_settings(config).get("threshold"))
        return cls(config.routing.signals.jailbreak, detect, threshold, uses_vectors)

    async def _call(
        self, text: str, vectors: np.ndarray | None, threshold: float, rule: JailbreakSignal
    ) -> list[Any]:
        patterns, benign = list(rule.jailbreak_patterns), list(rule.benign_patterns)
        return list(await self._detect([text], vectors, rule.method, threshold, patterns, benign))

    def _judge(self, raw: Any, threshold: float) -> tuple[bool, float, dict[str, Any]]:
        result = JailbreakResult.model_validate(raw)
        detail = {
            "score": result.score,
            "method": result.method,
            "threshold": threshold,
            "patterns_detected": list(result.patterns_detected),
            "detection_types": list(result.detection_types),
        }
        return result.is_jailbreak, result.score, detail


def jailbreak_factory(detect: JailbreakDetectFn | None) -> EvaluatorFactory:
    """`PipelineServices.evaluators["jailbreak"]` entry over a detect callable."""

    def factory(config: RouterConfig, services: Any = None) -> JailbreakEvaluator:
        judge = llm_judge.build_judge(config, "guardrail", getattr(services, "llm_client", None))
        evaluator = JailbreakEvaluator.from_config(config, with_llm_guard(detect, judge))
        evaluator.cascade = judge  # rules with a cascade_band ask it about uncertain scores
        return evaluator

    return factory


def with_llm_guard(
    detect: JailbreakDetectFn | None, judge: llm_judge.LLMJudge | None
) -> JailbreakDetectFn | None:
    """`detect`, except that rules with method `vllm` ask the guard LLM."""
    if detect is None and judge is None:
        return None

    async def run(
        texts: list[str],
        vectors: np.ndarray | None,
        method: str,
        threshold: float,
        patterns: list[str],
        benign: list[str],
    ) -> list[Any]:
        if method != llm_judge.METHOD:
            if detect is None:
                raise RuntimeError("no jailbreak guard configured")
            return await detect(texts, vectors, method, threshold, patterns, benign)
        if judge is None:
            raise RuntimeError(
                "method vllm needs an external model with model_role guardrail (global.model_catalog.external)"
            )
        return list(await asyncio.gather(*(judge.guard(text, threshold) for text in texts)))

    return run
