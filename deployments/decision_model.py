"""DecisionModel deployment: a thin Ray Serve host for the decision model
(app/srun/decisions.py), the same engine `svc-srun run` serves over HTTP.

`decide(body) -> dict` answers a decision request (spec 2 wire shapes) and raises the
engine's RuntimeFailure subclasses (InvalidRequest, RejectedInput, ...) with `.status` and
`.code`, which the frontend maps to its fixed public error words (app/api/decisions.py).
Each encoder text is queued on a per-instance `@serve.batch` queue (see deployments/
embedding.py for why per instance), so states and option texts from concurrent requests
share encoder passes. `card()` returns the model card; `info()` the load state.

A model that fails to load does not fail the deployment: `decide` raises NotReady (503).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve

from app.runtime.schemas import NotReady
from app.srun.catalog import DECISION_MODEL, load
from app.srun.decisions import DecisionModel as DecisionEngine
from app.srun.decisions import EncodedRow

log = logging.getLogger("svc_sr.decision_model")

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.002


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.1})
class DecisionModel:
    def __init__(self, engine: str = "auto", device: str = "cpu") -> None:
        self._model: DecisionEngine | None = None
        self._error: str | None = None
        try:
            model = load(DECISION_MODEL, engine=engine, device=device)
            assert isinstance(model, DecisionEngine)
            self._model = model
        except Exception as exc:  # serve what we can; calls say the model is not ready
            self._error = f"{type(exc).__name__}: {exc}"
            log.error("decision model not loaded: %s", self._error)
        self._encode_one = serve.batch(
            max_batch_size=DEFAULT_MAX_BATCH_SIZE, batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S
        )(self._encode_batch)

    def _require(self) -> DecisionEngine:
        if self._model is None:
            raise NotReady(f"decision model not loaded ({(self._error or 'unknown').split(':', 1)[0]})")
        return self._model

    async def _encode_batch(self, texts: list[str]) -> list[EncodedRow]:
        model = self._require()
        return await asyncio.to_thread(model.forward, texts)

    async def _encode(self, texts: list[str]) -> list[EncodedRow]:
        return list(await asyncio.gather(*(self._encode_one(t) for t in texts)))

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        model = self._require()
        return (await model.decide(body, self._encode)).to_wire()

    async def card(self) -> dict[str, Any]:
        return self._require().card.to_wire()

    async def info(self) -> dict[str, Any]:
        return {"name": DECISION_MODEL, "loaded": self._model is not None, "error": self._error}
