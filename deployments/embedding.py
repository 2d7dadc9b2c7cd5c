"""Embedding deployment: a thin Ray Serve host for the shared MiniLM encoder.

Batching is per text: `embed(texts)` enqueues each text on its own, so one batch can mix
texts from many callers (a router embeds one prompt per request) and a caller with many
texts fills several batches; the rows come back in the caller's order.

The `@serve.batch` queue is created per instance (in __init__) rather than by decorating
the method: a decorated method shares one queue, bound to one event loop, across every
instance in the process, which breaks when a process hosts the deployment twice (tests,
local testing mode). Ray 2.60's local testing mode sets no replica context, which the
batch queue reads on creation; tests/unit/test_model_deployments.py shows the workaround.

Resources (`num_cpus`, replicas, autoscaling) come from the graph builder's options; the
decorator only sets what correctness needs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from ray import serve

from app.runtime.encoder import (
    DEFAULT_MAX_TOKENS,
    EMBEDDING_DIM,
    MODEL_NAME,
    MiniLMEncoder,
    shared_encoder,
)

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.002
# Tokenising a few KB takes well under a millisecond; longer texts go to a thread.
_INLINE_TOKENIZE_CHARS = 4096


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


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, list | tuple):
        raise TypeError(f"embed() takes a list of strings, got {type(texts).__name__}")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"embed() texts[{index}] is {type(text).__name__}, not str")
    return list(texts)


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.25})
class Embedding:
    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, threads: int | None = None) -> None:
        default = max_tokens == DEFAULT_MAX_TOKENS and threads is None
        self._encoder = shared_encoder() if default else MiniLMEncoder(max_tokens=max_tokens, threads=threads)
        self._encoder.warm_up()
        self._tuning = EmbeddingTuning()
        self._batches = self._batched_texts = self._largest_batch = 0
        self._encode_one = serve.batch(
            max_batch_size=self._tuning.max_batch_size,
            batch_wait_timeout_s=self._tuning.batch_wait_timeout_s,
        )(self._encode_batch)

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Accepts {max_batch_size, batch_wait_timeout_s}; raises ValueError on bad values."""
        tuning = EmbeddingTuning.model_validate(user_config or {})
        self._encode_one.set_max_batch_size(tuning.max_batch_size)
        self._encode_one.set_batch_wait_timeout_s(tuning.batch_wait_timeout_s)
        self._tuning = tuning

    async def _encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        # The ONNX session releases the GIL; running it in a thread keeps the loop serving.
        vectors = await asyncio.to_thread(self._encoder.encode, texts)
        self._batches += 1
        self._batched_texts += len(texts)
        self._largest_batch = max(self._largest_batch, len(texts))
        return list(vectors)

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, shape (len(texts), 384). TypeError on non-string input."""
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        rows = await asyncio.gather(*(self._encode_one(text) for text in items))
        return np.stack(rows).astype(np.float32, copy=False)

    async def count_tokens(self, text: str) -> int:
        """Tokens including [CLS]/[SEP], as the encoder sees them (so capped at max_tokens)."""
        if not isinstance(text, str):
            raise TypeError(f"count_tokens() takes a string, got {type(text).__name__}")
        if len(text) <= _INLINE_TOKENIZE_CHARS:
            return self._encoder.count_tokens(text)
        return await asyncio.to_thread(self._encoder.count_tokens, text)

    async def info(self) -> dict[str, Any]:
        return EmbeddingInfo(
            model=MODEL_NAME,
            dim=EMBEDDING_DIM,
            max_tokens=self._encoder.max_tokens,
            max_batch_size=self._tuning.max_batch_size,
            batch_wait_timeout_s=self._tuning.batch_wait_timeout_s,
            batches=self._batches,
            batched_texts=self._batched_texts,
            largest_batch=self._largest_batch,
        ).model_dump()
