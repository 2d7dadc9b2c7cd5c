"""Ray-free state machines behind the graph's model deployments (Embedding, DomainClassifier;
the Guard's is in app/runtime/hosted_guard.py). Each holds the engine objects svc-srun serves
(app/runtime/tasks.py, loaded by `registry.load_model`) and does everything a deployment
method does except the transport: input checks, the per-caller settings applied after a
shared batch, load state and `info()`. The deployment files keep only Ray Serve glue: the
decorator, the per-instance `@serve.batch` queues (whose batch functions call `*_batch`
here), handles and `reconfigure`.

Batching is per text: a method enqueues each text on its own (`batched`, the deployment's
batched function), so one batch mixes texts of many callers and the rows come back in each
caller's order. A model that fails to load does not fail its host: calls raise
ModelNotLoadedError with the failure's kind (paths stay in the log and `info()`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.runtime.encoder import MODEL_NAME
from app.runtime.registry import load_model
from app.runtime.schemas import ModelNotLoadedError
from app.runtime.tasks import EmbeddingModel, LabelProbabilityModel

log = logging.getLogger("svc_sr.models")

M = TypeVar("M")
Encode = Callable[[list[str]], Awaitable[np.ndarray]]  # texts -> (n, dim) unit vectors
Batched = Callable[[Any], Awaitable[Any]]  # one item through a deployment's @serve.batch queue

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.002
# The Guard's and DomainClassifier's queues wait for no batch-mates: a batch is what queued
# while the previous one ran (one runs at a time), so a lone request is not held 2 ms per call
# and batches still grow with load. Their models run on CPU, where a wider batch buys little.
NO_BATCH_WAIT_S = 0.0
# Tokenising a few KB takes well under a millisecond; longer texts go to a thread.
INLINE_TOKENIZE_CHARS = 4096


# ----------------------------------------------------------------------------- input checks


def check_texts(texts: Any, caller: str | None = None) -> list[str]:
    """`texts` as a list of strings; TypeError naming `caller` (or `texts`) otherwise."""
    if isinstance(texts, str) or not isinstance(texts, list | tuple):
        lead = f"{caller} takes" if caller else "texts must be"
        raise TypeError(f"{lead} a list of strings, got {type(texts).__name__}")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            where = f"{caller} texts" if caller else "texts"
            raise TypeError(f"{where}[{index}] is {type(text).__name__}, not str")
    return list(texts)


def check_vectors(vectors: Any, n: int) -> np.ndarray | None:
    """Given vectors as an (n, dim) float32 array (one row may come flat); ValueError otherwise."""
    if vectors is None:
        return None
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1 and n == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2 or array.shape[0] != n:
        raise ValueError(f"vectors must have shape ({n}, dim), got {array.shape}")
    return array


def check_threshold(threshold: Any) -> float | None:
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a number within [0, 1], got {threshold!r}")
    return float(threshold)


# ----------------------------------------------------------------------------- load state


class Loaded(Generic[M]):
    """A model, or why it is missing. `require()` is what every call goes through."""

    def __init__(self, label: str, model: M | None, error: str | None) -> None:
        self.label = label
        self.model = model
        self.error = error

    @classmethod
    def load(cls, label: str, build: Callable[[], M]) -> Loaded[M]:
        try:
            return cls(label, build(), None)
        except Exception as exc:  # serve what we can; calls to this model say it is not loaded
            root = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
            error = f"{type(root).__name__}: {exc}"
            log.error("%s not loaded: %s", label, error)
            return cls(label, None, error)

    @property
    def loaded(self) -> bool:
        return self.model is not None

    def require(self) -> M:
        if self.model is None:
            kind = (self.error or "unknown").split(":", 1)[0]  # the kind only: no server paths
            raise ModelNotLoadedError(f"{self.label} not loaded ({kind})")
        return self.model


def expect_type(model: Any, kind: type[M]) -> M:
    if not isinstance(model, kind):
        raise TypeError(f"expected a {kind.__name__}, the registry gave {type(model).__name__}")
    return model


async def encode_texts(
    texts: list[str], encode: Encode | None, local: Callable[[list[str]], np.ndarray]
) -> np.ndarray:
    """Vectors for texts that came without any: the bound Embedding deployment (`encode`), else
    the model's own encoder in a thread."""
    if encode is not None:
        return np.asarray(await encode(texts), dtype=np.float32)
    return await asyncio.to_thread(local, texts)


# ----------------------------------------------------------------------------- Embedding


class EmbeddingTuning(BaseModel):
    """Hot-reloadable batching knobs (Serve user_config); other keys are ignored."""

    model_config = ConfigDict(extra="ignore")

    max_batch_size: int = Field(default=DEFAULT_MAX_BATCH_SIZE, ge=1, le=1024)
    batch_wait_timeout_s: float = Field(default=DEFAULT_BATCH_WAIT_TIMEOUT_S, ge=0, le=1)


class EmbeddingInfo(BaseModel):
    model: str
    dim: int
    max_tokens: int
    engine: str = "onnxruntime"
    device: str = "cpu"
    max_batch_size: int
    batch_wait_timeout_s: float
    # Since start: encoder calls, texts they carried, and the largest one (batching at work).
    batches: int
    batched_texts: int
    largest_batch: int


class HostedEmbedding:
    """The Embedding deployment's state: the minilm-embedding model and batching counters."""

    def __init__(self, model: EmbeddingModel) -> None:
        self.model = model
        self.tuning = EmbeddingTuning()
        self.batches = self.batched_texts = self.largest_batch = 0

    @classmethod
    def load(cls, engine: str = "auto", device: str = "cpu") -> HostedEmbedding:
        """Raises (NotReady, InvalidRequest) when the encoder cannot load: nothing to serve then."""
        return cls(expect_type(load_model("minilm-embedding", engine=engine, device=device), EmbeddingModel))

    @staticmethod
    def tuning_from(user_config: dict[str, Any] | None) -> EmbeddingTuning:
        """Validated knobs (pydantic's ValueError on bad values); apply with `self.tuning = ...`."""
        return EmbeddingTuning.model_validate(user_config or {})

    async def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        # The ONNX session releases the GIL; running it in a thread keeps the loop serving.
        rows = await asyncio.to_thread(self.model.forward, texts)
        self.batches += 1
        self.batched_texts += len(texts)
        self.largest_batch = max(self.largest_batch, len(texts))
        return rows

    async def embed(self, texts: Any, batched: Batched) -> np.ndarray:
        """Unit-length float32 vectors, shape (len(texts), dim). TypeError on non-string input."""
        items = check_texts(texts, "embed()")
        if not items:
            return np.zeros((0, self.model.dim), dtype=np.float32)
        rows = await asyncio.gather(*(batched(text) for text in items))
        return np.stack(rows).astype(np.float32, copy=False)

    async def count_tokens(self, text: Any) -> int:
        """Tokens including [CLS]/[SEP], as the encoder sees them (so capped at max_tokens)."""
        if not isinstance(text, str):
            raise TypeError(f"count_tokens() takes a string, got {type(text).__name__}")
        if len(text) <= INLINE_TOKENIZE_CHARS:
            return self.model.count_tokens(text)
        return await asyncio.to_thread(self.model.count_tokens, text)

    def info(self) -> dict[str, Any]:
        card = self.model.card
        return EmbeddingInfo(
            model=MODEL_NAME,
            dim=self.model.dim,
            max_tokens=self.model.encoder.max_tokens,
            engine=card.engine or "onnxruntime",
            device=card.device,
            max_batch_size=self.tuning.max_batch_size,
            batch_wait_timeout_s=self.tuning.batch_wait_timeout_s,
            batches=self.batches,
            batched_texts=self.batched_texts,
            largest_batch=self.largest_batch,
        ).model_dump()


# ----------------------------------------------------------------------------- DomainClassifier


class HostedDomain:
    """The DomainClassifier deployment's state: the domain-classifier model, loaded or not.

    It answers the head's best label; the family applies its threshold and fallback to whatever
    engine answered, so every caller shares batches."""

    def __init__(self, loaded: Loaded[LabelProbabilityModel], encode: Encode | None = None) -> None:
        self.loaded = loaded
        self.encode = encode

    @classmethod
    def load(cls, encode: Encode | None = None) -> HostedDomain:
        def build() -> LabelProbabilityModel:
            # The Router hands this host a vector with every text: no encoder unless one is missing.
            return expect_type(load_model("domain-classifier", lazy_encoder=True), LabelProbabilityModel)

        return cls(Loaded.load("domain classifier", build), encode)

    def head_batch(self, items: list[tuple[str, np.ndarray]]) -> list[Any]:
        """The head over one batch of (text, vector) items (run it in a thread)."""
        model = self.loaded.require()
        return model.classify_vectors(np.stack([vector for _, vector in items]), [text for text, _ in items])

    async def classify(self, texts: Any, vectors: Any, batched: Batched) -> list[dict[str, Any]]:
        """{category, confidence, probabilities} per text: the head's answer as it is (the
        threshold and fallback are the family's, app/runtime/signal_readers.py). TypeError or
        ValueError on bad input; ModelNotLoadedError when the model is not loaded."""
        items = check_texts(texts)
        given = check_vectors(vectors, len(items))
        model = self.loaded.require()
        if not items:
            return []
        if given is None:
            given = await encode_texts(items, self.encode, model.encoder.encode)
        results = await asyncio.gather(*(batched((t, v)) for t, v in zip(items, given, strict=True)))
        return [
            {"category": r.category, "confidence": r.confidence, "probabilities": r.probabilities}
            for r in results
        ]

    def info(self) -> dict[str, Any]:
        model = self.loaded.model
        return {
            "name": "domain_classifier",
            "loaded": model is not None,
            "device": model.card.device if model is not None else None,  # the inventory's device
            "error": self.loaded.error,
            "model": model.info() if model is not None else None,
        }
