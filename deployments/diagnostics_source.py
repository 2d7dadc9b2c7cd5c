"""The diagnostics' ClassifierSource over the model deployments and the Router (app/api/
diagnostics_service.py): the model calls ask the DomainClassifier's and Guard's engines by handle
(app/api/engine_classifiers.py over deployments/signal_engines.py), unwrapping Ray's errors
through deployments/ray_compat.py so a replica's own error (ModelNotLoadedError, ValueError, ...)
reaches the diagnostics as itself."""

from __future__ import annotations

from typing import Any

from ray.serve.handle import DeploymentHandle

from app.api.engine_classifiers import EngineClassifiers
from app.runtime.schemas import ModelNotLoadedError
from deployments import ray_compat
from deployments.signal_engines import handle_engines


def _unavailable(exc: BaseException) -> BaseException:
    return ModelNotLoadedError(f"classify: deployment unavailable ({type(exc).__name__})")


class HandleClassifiers(EngineClassifiers):
    """The diagnostics' ClassifierSource over the model deployments and the Router."""

    def __init__(
        self,
        domain: DeploymentHandle | None,
        guard: DeploymentHandle | None,
        router: DeploymentHandle,
        embedding: DeploymentHandle | None = None,
    ) -> None:
        # No resend: the diagnostics report what happened (503 MODEL_NOT_LOADED when unreachable).
        super().__init__(
            handle_engines(domain, guard, retries=0, unavailable=_unavailable, overloaded=_unavailable)
        )
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

    async def preview(self, text: str) -> dict[str, Any] | None:
        body = {"model": "MoM", "messages": [{"role": "user", "content": text}]}
        return await self._call(self._router, "preview", body, {})

    async def embed(self, texts: list[str]) -> Any:
        """Unit sentence vectors from the graph's encoder (fact-check, embeddings, similarity, rerank)."""
        return await self._call(self._embedding, "embed", texts)
