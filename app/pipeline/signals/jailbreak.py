"""Jailbreak signals: `routing.signals.jailbreak[]`, the `jailbreak` decision plugin and the
global prompt guard (`global.model_catalog.modules.prompt_guard`).

A rule `{name, method, threshold, include_history, jailbreak_patterns, benign_patterns}`
matches when the guard flags the text (`is_jailbreak`: score >= threshold). The text is
the human's ask, or with `include_history` the conversation text as paragraphs
(app/common/chat_text.py: every user turn, so an attack split over turns is seen whole).
For the ask the request's shared query embedding is passed along, so an engine on the
Router's vector space does not encode it again; history texts are encoded on its side.
Confidence is the guard's risk score, also when not matched (so `NOT` works).

A rule that leaves `threshold` unset takes `prompt_guard.threshold` when configured.
The guard is a `SignalEngine` (app/runtime/signal_engine.py): the heads in the Router, the
Guard deployment or a `prompt_guard` binding's workers, reading the score of label `head`
(default `jailbreak`); rules with method `vllm` ask the guard LLM
(`global.model_catalog.external`, app/pipeline/signals/llm_judge.py). Tests pass a fake.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.config.document import RouterConfig
from app.config.signals import CASCADE_KEYS, JailbreakSignal
from app.models.tool_injection import planted_instruction
from app.pipeline.signals import llm_judge
from app.pipeline.signals.band_judge import build_band_judge
from app.pipeline.signals.base import EvaluatorFactory
from app.pipeline.signals.domain import catalog_section, unit_float
from app.pipeline.signals.guarded import TextRuleEvaluator
from app.runtime.signal_engine import SignalEngine, SignalItem, SignalRequest, UnavailableEngine
from app.runtime.signal_readers import JAILBREAK_HEAD, jailbreak_result

FAMILY = "jailbreak"
PROMPT_GUARD_RULE = "global:prompt_guard"
NO_GUARD_LLM = "method vllm needs an external model with model_role guardrail (global.model_catalog.external)"


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
    if isinstance(section.get("planted_instructions"), bool):
        fields["planted_instructions"] = section["planted_instructions"]
    for key in CASCADE_KEYS:
        if isinstance(section.get(key), list):
            fields[key] = section[key]
    return JailbreakSignal(**fields)


class JailbreakEvaluator(TextRuleEvaluator[JailbreakSignal]):
    family = FAMILY
    detector = "jailbreak guard"

    def __init__(
        self,
        rules: list[JailbreakSignal],
        engine: SignalEngine | None,
        default_threshold: float | None = None,
        judge: SignalEngine | None = None,
        head: str = JAILBREAK_HEAD,
    ) -> None:
        super().__init__(rules, engine, default_threshold)
        self.judge = judge  # the guard LLM, for rules with method `vllm`
        self.head = head  # the label whose score is the risk score

    @classmethod
    def from_config(
        cls,
        config: RouterConfig,
        engine: SignalEngine | None,
        judge: SignalEngine | None = None,
        head: str = JAILBREAK_HEAD,
    ) -> JailbreakEvaluator:
        threshold = unit_float(prompt_guard_settings(config).get("threshold"))
        return cls(config.routing.signals.jailbreak, engine, threshold, judge, head)

    def engine_for(self, rule: JailbreakSignal) -> SignalEngine | None:
        if self.engine is None and self.judge is None:
            return None
        if rule.method == llm_judge.METHOD:
            return self.judge or UnavailableEngine("guard LLM", NO_GUARD_LLM)
        return self.engine or UnavailableEngine(self.detector, f"no {self.detector} configured")

    def _request(
        self, text: str, vectors: np.ndarray | None, threshold: float, rule: JailbreakSignal
    ) -> SignalRequest:
        return SignalRequest(
            texts=[text],
            vectors=vectors,
            threshold=threshold,
            method=rule.method,
            patterns=list(rule.jailbreak_patterns),
            benign_patterns=list(rule.benign_patterns),
        )

    def _judge(
        self, item: SignalItem, threshold: float, rule: JailbreakSignal
    ) -> tuple[bool, float, dict[str, Any]]:
        result = jailbreak_result(item, threshold, self.head)
        detail = {
            "score": result.score,
            "method": result.method,
            "threshold": threshold,
            "patterns_detected": list(result.patterns_detected),
            "detection_types": list(result.detection_types),
        }
        return result.is_jailbreak, result.score, detail

    def _reads_planted(self, rule: JailbreakSignal) -> bool:
        return rule.planted_instructions

    def _planted(self, part: str, text: str, rule: JailbreakSignal) -> str | None:
        """An instruction planted for the AI in a tool result flags it whatever the head scored
        (app/models/tool_injection.py: the head misses most of them)."""
        return planted_instruction(text) if part == "tool_results" else None


def jailbreak_factory(engine: SignalEngine | None) -> EvaluatorFactory:
    """`PipelineServices.evaluators["jailbreak"]` entry over the graph's guard engine (and the
    guard LLM for `vllm` rules, when the config names one)."""

    def factory(config: RouterConfig, services: Any = None) -> JailbreakEvaluator:
        judge = llm_judge.build_judge(config, "guardrail", getattr(services, "llm_client", None))
        evaluator = JailbreakEvaluator.from_config(
            config, engine, llm_judge.JudgeEngine(judge) if judge else None
        )
        evaluator.cascade = build_band_judge(config, services, judge)  # judges uncertain scores
        return evaluator

    return factory
