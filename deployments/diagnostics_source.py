"""The diagnostics' ClassifierSource over the model deployments and the Router (app/api/
diagnostics_service.py), unwrapping Ray's errors through deployments/ray_compat.py so a
replica's own error (ModelNotLoadedError, ValueError, ...) reaches the diagnostics as itself."""

from __future__ import annotations

from typing import Any

from ray.serve.handle import DeploymentHandle

from app.runtime.schemas import ModelNotLoadedError
from deployments import ray_compat


class HandleClassifiers:
    """The diagnostics' ClassifierSource over the model deployments and the Router."""

    def __init__(
        self,
        domain: DeploymentHandle | None,
        guard: DeploymentHandle | None,
        router: DeploymentHandle,
        embedding: DeploymentHandle | None = None,
    ) -> None:
        self._domain = domain
        self._guard = guard
        self._router = router
        self._embedding = embedding

    @staticmethod
    async def _call(handle: DeploymentHandle | None, method: str, *args: Any) -> Any:
        if handle is None:
            raise ModelNotLoadedError(f"no deployment serves {method}")

        def unavailable(exc: BaseException) -> BaseException:
            return ModelNotLoadedError(f"{method}: deployment unavailable ({type(exc).__name__})")

        # The replica's own exception (ModelNotLoadedError, ValueError, ...) reaches the diagnostics as itself.
        return await ray_compat.call(handle, method, *args, unavailable=unavailable, overloaded=unavailable)

    async def classify_domain(
        self, texts: list[str], threshold: float | None, fallback_category: str
    ) -> list[Any]:
        return await self._call(self._domain, "classify", texts, None, threshold, fallback_category)

    async def detect_pii(
        self, texts: list[str], entity_types: list[str] | None, threshold: float | None
    ) -> list[Any]:
        return await self._call(self._guard, "detect_pii", texts, entity_types, threshold)

    async def detect_jailbreak(
        self,
        texts: list[str],
        method: str,
        threshold: float | None,
        jailbreak_patterns: list[str],
        benign_patterns: list[str],
    ) -> list[Any]:
        return await self._call(
            self._guard,
            "detect_jailbreak",
            texts,
            None,
            method,
            threshold,
            jailbreak_patterns,
            benign_patterns,
        )

    async def detect_harmful(
        self, texts: list[str], threshold: float | None, categories: list[str]
    ) -> list[Any]:
        return await self._call(self._guard, "detect_harmful", texts, None, threshold, categories)

    async def preview(self, text: str) -> dict[str, Any] | None:
        body = {"model": "MoM", "messages": [{"role": "user", "content": text}]}
        return await self._call(self._router, "preview", body, {})

    async def embed(self, texts: list[str]) -> Any:
        """Unit sentence vectors from the graph's encoder (fact-check, embeddings, similarity, rerank)."""
        return await self._call(self._embedding, "embed", texts)
