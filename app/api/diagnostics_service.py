"""The classification diagnostics: intent (domain), PII and jailbreak classifiers.

The classifiers arrive as a `ClassifierSource` (the Ingress adapts the DomainClassifier,
Guard and Router handles to it; tests pass fakes), so this module needs no Ray. Intent
answers also carry `recommended_model` / `routing_decision` from the Router's routing
preview of the text (None when the preview is unavailable).

Model calls fail as the management error body: 408 TIMEOUT_ERROR (2 minute deadline), 503
MODEL_NOT_LOADED (classifier not loaded or unreachable), 400 INVALID_INPUT (input the
model refused, unknown PII entity type), 500 CLASSIFICATION_ERROR (500
UNIFIED_CLASSIFICATION_ERROR for batches). No call reaches a generation backend.

Settings come from the live config: domain threshold / fallback category and the
`mmlu_categories` mapping of `routing.signals.domains` (the reported category is the
configured name), `classifier.pii.threshold`, `prompt_guard.{threshold, method}`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np

from app.api.classify_schemas import (
    BatchRequest,
    BatchResponse,
    BatchStatistics,
    BatchVariant,
    CombinedRequest,
    CombinedResponse,
    IntentBatch,
    IntentBatchItem,
    IntentClassification,
    IntentOptions,
    IntentRequest,
    IntentResponse,
    PIIBatch,
    PIIEntityOut,
    PIIOptions,
    PIIRequest,
    PIIResponse,
    SecurityOptions,
    SecurityRequest,
    SecurityResponse,
)
from app.api.diagnostics_requests import ManagementError, invalid, max_batch_size
from app.config.document import RouterConfig
from app.models.domain import DomainResult, map_to_configured
from app.models.harmful import HarmfulResult
from app.models.jailbreak import DEFAULT_THRESHOLD, JailbreakResult
from app.models.pii import PII_ENTITY_TYPES, PIIResult
from app.pipeline.signals.domain import domain_settings
from app.pipeline.signals.harmful import prompt_guard_harmful_rule
from app.pipeline.signals.jailbreak import prompt_guard_settings
from app.pipeline.signals.pii import pii_default_threshold
from app.runtime.schemas import ModelNotLoadedError

log = logging.getLogger("svc_sr.diagnostics")

DEADLINE_S = 120.0  # spec 01 "typed model call request deadline"
LOW_CONFIDENCE = 0.7  # batch statistics: below this (or options.confidence_threshold) is "low"


class ClassifierSource(Protocol):
    """The model calls behind the diagnostics; each returns one result (or its dict) per text."""

    async def classify_domain(
        self, texts: list[str], threshold: float | None, fallback_category: str
    ) -> list[Any]: ...

    async def detect_pii(
        self, texts: list[str], entity_types: list[str] | None, threshold: float | None
    ) -> list[Any]: ...

    async def detect_jailbreak(
        self,
        texts: list[str],
        method: str,
        threshold: float | None,
        jailbreak_patterns: list[str],
        benign_patterns: list[str],
    ) -> list[Any]: ...

    # Optional: `detect_harmful(texts, threshold, categories)` -> HarmfulResult dicts. A backend
    # without it (or whose harmful-content classifier is not loaded) answers jailbreak-only.
    # Optional: `embed(texts)` -> (n, dim) unit vectors of the graph's encoder (the Embedding
    # deployment): fact-check, embeddings, similarity and rerank read it; without it they are 503.

    async def preview(self, text: str) -> dict[str, Any] | None:
        """Routing preview of a one-message MoM request (recommended model, decision)."""
        ...


class ConfigSource(Protocol):
    def current(self) -> RouterConfig: ...


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


class Diagnostics:
    def __init__(self, backend: ClassifierSource | None, config: ConfigSource) -> None:
        self.backend = backend
        self.config = config

    # -------------------------------------------------------------- model calls
    async def _call(
        self,
        make: Callable[[ClassifierSource], Awaitable[list[Any]]],
        n: int,
        error_code: str = "CLASSIFICATION_ERROR",
    ) -> list[Any]:
        if self.backend is None:
            raise ManagementError(503, "MODEL_NOT_LOADED", "classification models are not available")
        try:
            results = await asyncio.wait_for(make(self.backend), DEADLINE_S)
        except ManagementError:
            raise
        except TimeoutError:
            raise ManagementError(
                408, "TIMEOUT_ERROR", f"classification took longer than {DEADLINE_S:.0f} s"
            ) from None
        except ModelNotLoadedError as exc:
            raise ManagementError(
                503, "MODEL_NOT_LOADED", str(exc) or "classification model unavailable"
            ) from None
        except (ValueError, TypeError) as exc:  # input the model refused (PIIInputError is a ValueError)
            raise invalid(str(exc)) from None
        except Exception as exc:
            log.exception("classification failed")
            raise ManagementError(500, error_code, f"classification failed: {type(exc).__name__}") from exc
        if not isinstance(results, list) or len(results) != n:
            raise ManagementError(500, error_code, "classifier returned a malformed result")
        return results

    async def embed(self, texts: list[str], error_code: str = "CLASSIFICATION_ERROR") -> np.ndarray:
        """(len(texts), dim) unit vectors from the backend's `embed`; 503 MODEL_NOT_LOADED without one."""

        async def call(backend: ClassifierSource) -> list[Any]:
            embed = getattr(backend, "embed", None)
            if embed is None:
                raise ModelNotLoadedError("no encoder is bound to the diagnostics")
            return list(np.asarray(await embed(texts), dtype=np.float32))

        return np.stack(await self._call(call, len(texts), error_code)).astype(np.float32, copy=False)

    async def _preview(self, text: str) -> dict[str, Any] | None:
        if self.backend is None:
            return None
        try:
            return await asyncio.wait_for(self.backend.preview(text), DEADLINE_S)
        except Exception as exc:  # the recommendation is optional: the classification still answers
            log.warning("routing preview for diagnostics failed: %s", exc)
            return None

    # -------------------------------------------------------------- intent
    def _domain_args(self, options: IntentOptions) -> tuple[float | None, str]:
        threshold, fallback = domain_settings(self.config.current())
        return (
            options.confidence_threshold if options.confidence_threshold is not None else threshold
        ), fallback

    def _configured(self, category: str) -> str:
        domains = self.config.current().routing.signals.domains
        return map_to_configured(category, [(d.name, list(d.mmlu_categories)) for d in domains])

    async def _domain(self, texts: list[str], options: IntentOptions, code: str) -> list[DomainResult]:
        threshold, fallback = self._domain_args(options)
        raw = await self._call(lambda b: b.classify_domain(texts, threshold, fallback), len(texts), code)
        return [DomainResult.model_validate(r) for r in raw]

    async def intent(self, request: IntentRequest) -> IntentResponse:
        started = time.perf_counter()
        text = request.text
        (result,), preview = await asyncio.gather(
            self._domain([text], request.options, "CLASSIFICATION_ERROR"), self._preview(text)
        )
        category = self._configured(result.category)
        explanation = None
        if request.options.include_explanation:
            explanation = self._explain(result, category, self._domain_args(request.options)[0])
        return IntentResponse(
            classification=IntentClassification(
                category=category,
                confidence=round(result.confidence, 6),
                processing_time_ms=_elapsed_ms(started),
            ),
            probabilities=_rounded(result.probabilities) if request.options.return_probabilities else None,
            recommended_model=(preview or {}).get("selected_model"),
            routing_decision=(preview or {}).get("decision"),
            explanation=explanation,
        )

    @staticmethod
    def _explain(result: DomainResult, category: str, threshold: float | None) -> str:
        ranked = sorted(result.probabilities.items(), key=lambda kv: kv[1], reverse=True)
        best, best_p = ranked[0] if ranked else (result.category, result.confidence)
        parts = [f"most likely domain {best!r} (p={best_p:.3f})"]
        if threshold is not None and result.confidence < threshold:
            parts.append(
                f"below the confidence threshold {threshold:g}, so the fallback {result.category!r} applies"
            )
        if category != result.category:
            parts.append(f"mapped to configured category {category!r} through mmlu_categories")
        runners = ", ".join(f"{c} {p:.3f}" for c, p in ranked[1:3])
        if runners:
            parts.append(f"runners-up: {runners}")
        return "; ".join(parts)

    # -------------------------------------------------------------- pii
    def _pii_args(self, options: PIIOptions) -> tuple[list[str] | None, float | None]:
        types = None
        if options.entity_types:
            types = list(dict.fromkeys(t.strip().upper() for t in options.entity_types if t.strip()))
            unknown = sorted(set(types) - set(PII_ENTITY_TYPES))
            if unknown:
                raise invalid(
                    f"options.entity_types: unknown entity types {unknown}; known: {list(PII_ENTITY_TYPES)}"
                )
        threshold = options.confidence_threshold
        if threshold is None:
            threshold = pii_default_threshold(self.config.current())
        return types or None, threshold

    async def _pii(self, texts: list[str], options: PIIOptions, code: str) -> list[PIIResult]:
        types, threshold = self._pii_args(options)
        raw = await self._call(lambda b: b.detect_pii(texts, types, threshold), len(texts), code)
        return [PIIResult.model_validate(r) for r in raw]

    @staticmethod
    def _pii_response(result: PIIResult, options: PIIOptions, elapsed_ms: float) -> PIIResponse:
        positions, mask = options.return_positions, options.mask_entities
        entities = [
            PIIEntityOut(
                type=e.type,
                value=e.value,
                confidence=e.confidence,
                start_position=e.start if positions else None,
                end_position=e.end if positions else None,
                masked_value=e.masked_value if mask else None,
            )
            for e in result.entities
        ]
        return PIIResponse(
            has_pii=result.has_pii,
            entities=entities,
            masked_text=result.masked_text if mask else None,
            security_recommendation="block" if result.has_pii else "allow",
            processing_time_ms=elapsed_ms,
        )

    async def pii(self, request: PIIRequest) -> PIIResponse:
        started = time.perf_counter()
        (result,) = await self._pii([request.text], request.options, "CLASSIFICATION_ERROR")
        return self._pii_response(result, request.options, _elapsed_ms(started))

    # -------------------------------------------------------------- security
    def _security_args(self, options: SecurityOptions) -> tuple[str, float | None]:
        guard = prompt_guard_settings(self.config.current())
        method = options.method or guard.get("method")
        if method not in ("classifier", "contrastive", "hybrid"):
            method = "classifier"
        threshold = options.threshold()
        if threshold is None:
            configured = guard.get("threshold")
            if (
                isinstance(configured, int | float)
                and not isinstance(configured, bool)
                and 0 <= configured <= 1
            ):
                threshold = float(configured)
        return method, threshold

    async def _security(
        self, texts: list[str], options: SecurityOptions, code: str
    ) -> list[tuple[JailbreakResult, HarmfulResult | None]]:
        method, threshold = self._security_args(options)
        raw, harmful = await asyncio.gather(
            self._call(lambda b: b.detect_jailbreak(texts, method, threshold, [], []), len(texts), code),
            self._harmful(texts),
        )
        return [(JailbreakResult.model_validate(r), h) for r, h in zip(raw, harmful, strict=True)]

    async def _harmful(self, texts: list[str]) -> list[HarmfulResult | None]:
        """Best effort: the harmful-content verdicts (prompt_guard.harmful's threshold and
        categories when set), or None each when the backend cannot give them."""
        detect = getattr(self.backend, "detect_harmful", None)
        if detect is None:
            return [None] * len(texts)
        rule = prompt_guard_harmful_rule(self.config.current(), require_enabled=False)
        try:
            raw = await asyncio.wait_for(detect(texts, rule.threshold, list(rule.categories)), DEADLINE_S)
            return [HarmfulResult.model_validate(r) for r in raw]
        except Exception as exc:  # the jailbreak answer stands on its own
            log.warning("harmful-content check skipped in diagnostics: %s", exc)
            return [None] * len(texts)

    def _security_response(
        self,
        verdicts: tuple[JailbreakResult, HarmfulResult | None],
        options: SecurityOptions,
        elapsed_ms: float,
    ) -> SecurityResponse:
        result, harmful = verdicts
        flagged_harm = harmful is not None and harmful.is_harmful
        types = list(result.detection_types)
        if harmful is not None and harmful.is_harmful:  # the harm categories join the detection types
            types += [t for t in harmful.detection_types if t not in types]
        if options.detection_types:  # narrows what is reported, not the verdict
            wanted = {t.strip().lower() for t in options.detection_types}
            types = [t for t in types if t.lower() in wanted]
        reasoning = None
        if options.include_reasoning:
            threshold = self._security_args(options)[1]
            threshold = DEFAULT_THRESHOLD if threshold is None else threshold
            verdict = ">=" if result.is_jailbreak else "<"
            reasoning = f"{result.method} risk score {result.score:.3f} {verdict} threshold {threshold:g}"
            if result.patterns_detected:
                reasoning += "; matched: " + ", ".join(result.patterns_detected)
            if harmful is not None:
                reasoning += f"; harmful-content score {harmful.score:.3f} ({harmful.category})"
        return SecurityResponse(
            is_jailbreak=result.is_jailbreak,
            risk_score=result.score,
            detection_types=types,
            confidence=result.confidence,
            recommendation="block" if result.is_jailbreak or flagged_harm else "allow",
            reasoning=reasoning,
            patterns_detected=list(result.patterns_detected),
            processing_time_ms=elapsed_ms,
        )

    async def security(self, request: SecurityRequest) -> SecurityResponse:
        started = time.perf_counter()
        (result,) = await self._security([request.text], request.options, "CLASSIFICATION_ERROR")
        return self._security_response(result, request.options, _elapsed_ms(started))

    # -------------------------------------------------------------- combined, batch
    async def combined(self, request: CombinedRequest) -> CombinedResponse:
        started = time.perf_counter()
        text, options = request.text, request.options
        intent, pii, security = await asyncio.gather(
            self.intent(IntentRequest(text=text, options=options.intent)),
            self.pii(PIIRequest(text=text, options=options.pii)),
            self.security(SecurityRequest(text=text, options=options.security)),
        )
        return CombinedResponse(
            intent=intent, pii=pii, security=security, processing_time_ms=_elapsed_ms(started)
        )

    async def batch(self, body: BatchRequest) -> BatchResponse:
        started = time.perf_counter()
        request: BatchVariant = body.root
        texts = request.texts
        limit = max_batch_size(self.config.current())
        if len(texts) > limit:
            raise invalid(f"batch size {len(texts)} exceeds the maximum of {limit} texts")
        code = "UNIFIED_CLASSIFICATION_ERROR"
        results: list[Any]
        labels: list[str]
        confidences: list[float]
        if isinstance(request, IntentBatch):
            options = request.options
            domain = await self._domain(texts, options, code)
            each = _elapsed_ms(started) / len(texts)
            results = [
                IntentBatchItem(
                    category=self._configured(r.category),
                    confidence=round(r.confidence, 6),
                    processing_time_ms=round(each, 3),
                    probabilities=_rounded(r.probabilities) if options.return_probabilities else None,
                )
                for r in domain
            ]
            labels = [r.category for r in results]
            confidences = [r.confidence for r in domain]
            low = options.confidence_threshold
        elif isinstance(request, PIIBatch):
            pii_options = request.options
            found = await self._pii(texts, pii_options, code)
            each = round(_elapsed_ms(started) / len(texts), 3)
            results = [self._pii_response(r, pii_options, each) for r in found]
            labels = ["pii" if r.has_pii else "no_pii" for r in found]
            # A text without PII counts as a confident negative.
            confidences = [max((e.confidence for e in r.entities), default=1.0) for r in found]
            low = pii_options.confidence_threshold
        else:
            security_options = request.options
            verdicts = await self._security(texts, security_options, code)
            each = round(_elapsed_ms(started) / len(texts), 3)
            results = [self._security_response(r, security_options, each) for r in verdicts]
            labels = ["jailbreak" if r.is_jailbreak else "benign" for r, _ in verdicts]
            confidences = [r.confidence for r, _ in verdicts]
            low = None
        cutoff = LOW_CONFIDENCE if low is None else low
        distribution: dict[str, int] = {}
        for label in labels:
            distribution[label] = distribution.get(label, 0) + 1
        return BatchResponse(
            results=results,
            total_count=len(texts),
            processing_time_ms=_elapsed_ms(started),
            statistics=BatchStatistics(
                category_distribution=distribution,
                avg_confidence=round(sum(confidences) / len(confidences), 6),
                low_confidence_count=sum(1 for c in confidences if c < cutoff),
            ),
        )


def _rounded(probabilities: dict[str, float]) -> dict[str, float]:
    return {k: round(float(v), 6) for k, v in probabilities.items()}
