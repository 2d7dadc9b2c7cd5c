"""LLM classifiers and guards (`global.model_catalog.external`, docs/configuration.md: models
with model_role `classification` or `guardrail`): the model's answer becomes a domain result or
a jailbreak verdict.

A guard model (Llama Guard, Qwen3Guard, ShieldGemma, or any chat model told to answer
safe/unsafe) gets the user text as the user turn; its chat template frames the question.
The verdict is the first verdict word of the answer: `unsafe`, `jailbreak`, `yes`,
`controversial` (score 0.5) flag it, `safe`, `benign`, `no` clear it. A classifier gets the
category names in a system prompt and answers with one of them. Anything else, a timeout,
or an unreachable model is a signal error: the rule's on_error decides, never a 500.

The call is the upstream client's (timeouts, in-cluster handle transport), with greedy
decoding and `llm_timeout_seconds` as the whole call's budget. `JudgeEngine` is the judge as a
`SignalEngine` (app/runtime/signal_engine.py), the transport the jailbreak family's `vllm`
rules and `classifier.domain.use_vllm` place the signal on: the guard answers the `jailbreak`
score with its verdict, the classifier the category it names.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from app.config.document import RouterConfig
from app.config.external_models import ExternalModel, external_model
from app.config.reliability import ReliabilityConfig
from app.llm import addressing
from app.runtime.signal_engine import SignalItem, SignalRequest, Verdict
from app.upstream.client import UpstreamClient
from app.upstream.targets import UpstreamTarget

METHOD = "vllm"
DEFAULT_THRESHOLD = 0.5  # a guard asked without a threshold: the jailbreak rules' default
_VERDICT = re.compile(r"\b(unsafe|jailbreak|controversial|safe|benign|yes|no)\b", re.IGNORECASE)
_SCORES = {
    "unsafe": 1.0,
    "jailbreak": 1.0,
    "yes": 1.0,
    "controversial": 0.5,
    "safe": 0.0,
    "benign": 0.0,
    "no": 0.0,
}
CLASSIFY_PROMPT = (
    "Classify the user's message into exactly one of these categories: {labels}. "
    "Answer with the category name only."
)


class JudgeError(RuntimeError):
    """The model answered nothing a verdict or a category can be read from."""


def guard_verdict(answer: str) -> tuple[float, str]:
    """(risk score, the verdict word) of a guard model's answer; JudgeError when it has none."""
    match = _VERDICT.search(answer)
    if match is None:
        raise JudgeError(f"no safe/unsafe verdict in the guard's answer {answer[:80]!r}")
    word = match.group(1).lower()
    return _SCORES[word], word


def answered_category(answer: str, labels: list[str]) -> str | None:
    """The label the answer names first (longest label first where one contains another)."""
    text = answer.lower()
    best: tuple[int, int, str] | None = None
    for label in labels:
        found = re.search(r"(?<![a-z])" + re.escape(label.lower()) + r"(?![a-z])", text)
        if found is not None:
            key = (found.start(), -len(label), label)
            best = key if best is None or key < best else best
    return None if best is None else best[2]


def judge_target(model: ExternalModel, config: RouterConfig) -> UpstreamTarget:
    """Where the judge's calls go: its llm_endpoint, else the in-cluster model it names."""
    if model.llm_endpoint is not None:
        return UpstreamTarget(
            model=model.name,
            provider_model_id=model.llm_model_name,
            base_url=model.llm_endpoint.url(),
            api_key_env=model.api_key_env,
        )
    served = next((m for m in config.providers.models if m.name == model.llm_model_name), None)
    if served is None or served.llm_config is None:
        raise JudgeError(
            f"external model {model.name!r}: no llm_endpoint, and {model.llm_model_name!r} is not a "
            "providers model served in the cluster (llm_config)"
        )
    return UpstreamTarget(
        model=model.name,
        provider_model_id=served.llm_config.served_name(served.name),
        base_url=addressing.base_url(served.name),
    )


class LLMJudge:
    """One external model, asked over the upstream client."""

    def __init__(self, model: ExternalModel, target: UpstreamTarget, client: UpstreamClient) -> None:
        self.model = model
        self._target = target
        self._client = client
        budget = f"{model.llm_timeout_seconds}s"
        self._reliability = ReliabilityConfig.model_validate({"total_timeout": budget})

    async def ask(self, text: str, system: str | None = None) -> str:
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": text})
        body = {
            "model": self.model.llm_model_name,
            "messages": messages,
            "max_tokens": self.model.max_tokens,
            "temperature": 0,
        }
        response = await self._client.complete([self._target], body, reliability=self._reliability)
        if not response.ok:
            raise JudgeError(f"{self.model.name} answered {response.status}")
        try:
            return str((response.json_body or {})["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError) as exc:
            raise JudgeError(f"{self.model.name}: no chat message in its answer") from exc

    async def guard(self, text: str, threshold: float, head_flagged: bool = False) -> SignalItem:
        """One text's `jailbreak` score and the verdict at `threshold` (the LLM's verdict does
        not depend on the head's, `head_flagged`)."""
        answer = await self.ask(text, self.model.system_prompt)
        score, word = guard_verdict(answer)
        verdict = Verdict(
            flagged=score >= threshold, score=score, confidence=1.0, method=METHOD, types=[f"llm:{word}"]
        )
        return SignalItem(scores={"jailbreak": score}, verdict=verdict)

    async def classify(self, text: str, labels: list[str]) -> SignalItem:
        """The category the answer names (probability 1), or no label (the family's fallback)."""
        system = self.model.system_prompt or CLASSIFY_PROMPT.format(labels=", ".join(labels))
        category = answered_category(await self.ask(text, system), labels)
        if category is None:
            return SignalItem(confidence=0.0, probabilities={})
        return SignalItem(label=category, confidence=1.0, probabilities={category: 1.0})


class JudgeEngine:
    """An LLM judge as a signal engine: with `labels`, the classifier choosing among them; else
    the guard, judging at the request's threshold. Each text is one chat call, concurrently."""

    reads_vectors = False

    def __init__(self, judge: LLMJudge, labels: list[str] | None = None) -> None:
        self.judge = judge
        self.labels = labels
        self.name = judge.model.name

    async def classify(self, request: SignalRequest) -> list[SignalItem]:
        if self.labels is not None:
            labels = self.labels
            return list(await asyncio.gather(*(self.judge.classify(t, labels) for t in request.texts)))
        threshold = request.threshold if request.threshold is not None else DEFAULT_THRESHOLD
        return list(await asyncio.gather(*(self.judge.guard(t, threshold) for t in request.texts)))

    def failed(self, reason: str) -> Exception:
        return JudgeError(reason)


def build_judge(config: RouterConfig, role: str, client: UpstreamClient | None) -> LLMJudge | None:
    """The config's first external model with `role`, ready to ask (None: none configured,
    or no client in this process)."""
    model = external_model(config.global_.model_catalog, role)
    if model is None or client is None:
        return None
    return LLMJudge(model, judge_target(model, config), client)
