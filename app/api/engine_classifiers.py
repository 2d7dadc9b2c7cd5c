"""The classification diagnostics' model calls (`ClassifierSource`, app/api/diagnostics_service.py)
over the signal interface (app/runtime/signal_engine.py): each call asks the family's engine,
wherever it runs, and reads the answer as the signal families do (app/runtime/signal_readers.py),
so a diagnostics answer and a routing signal never read one model differently."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.models.harmful import DEFAULT_THRESHOLD as HARMFUL_THRESHOLD
from app.models.jailbreak import DEFAULT_THRESHOLD as JAILBREAK_THRESHOLD
from app.runtime.schemas import ModelNotLoadedError
from app.runtime.signal_engine import SignalEngine, SignalItem, SignalRequest, checked
from app.runtime.signal_readers import domain_result, harmful_result, jailbreak_result, pii_result


class EngineClassifiers:
    """Domain, PII, jailbreak and harmful-content calls over `engines` (by family); a family
    without one is ModelNotLoadedError (503 MODEL_NOT_LOADED)."""

    def __init__(self, engines: Mapping[str, SignalEngine]) -> None:
        self.engines = dict(engines)

    async def _ask(self, family: str, request: SignalRequest) -> list[SignalItem]:
        engine = self.engines.get(family)
        if engine is None:
            raise ModelNotLoadedError(f"no deployment serves {family}")
        return checked(engine, await engine.classify(request), len(request.texts))

    async def classify_domain(
        self, texts: list[str], threshold: float | None, fallback_category: str
    ) -> list[Any]:
        items = await self._ask("domain", SignalRequest(texts=texts))
        return [
            domain_result(item, text, threshold, fallback_category).model_dump()
            for item, text in zip(items, texts, strict=True)
        ]

    async def detect_pii(
        self, texts: list[str], entity_types: list[str] | None, threshold: float | None
    ) -> list[Any]:
        items = await self._ask("pii", SignalRequest(texts=texts, threshold=threshold, labels=entity_types))
        return [
            pii_result(item, text, entity_types, threshold).model_dump()
            for item, text in zip(items, texts, strict=True)
        ]

    async def detect_jailbreak(
        self,
        texts: list[str],
        method: str,
        threshold: float | None,
        jailbreak_patterns: list[str],
        benign_patterns: list[str],
    ) -> list[Any]:
        request = SignalRequest(
            texts=texts,
            threshold=threshold,
            method=method,
            patterns=jailbreak_patterns,
            benign_patterns=benign_patterns,
        )
        cut = JAILBREAK_THRESHOLD if threshold is None else threshold
        return [jailbreak_result(item, cut).model_dump() for item in await self._ask("jailbreak", request)]

    async def detect_harmful(
        self, texts: list[str], threshold: float | None, categories: list[str]
    ) -> list[Any]:
        request = SignalRequest(texts=texts, threshold=threshold, labels=categories or None)
        cut = HARMFUL_THRESHOLD if threshold is None else threshold
        items = await self._ask("harmful", request)
        return [harmful_result(item, cut, categories).model_dump() for item in items]
