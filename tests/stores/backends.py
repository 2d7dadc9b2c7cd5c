"""The response-cache backends the contract suite runs against, and its vector helpers.

Every backend is built the way the router builds it: a `ResponseCacheConfig` through
`app.cache.factory.open_cache_store`. Each test gets a fresh store location (a Redis index
and key prefix of its own, a Milvus Lite file of its own), so cases never see each other's
entries; a `BackendMaker` called twice gives two backend objects over the same store,
which is how the suite checks that entries outlive the object that wrote them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from app.cache.base import CacheHit, ResponseCacheStore
from app.cache.factory import open_cache_store
from app.common.ports import free_port
from app.config.global_config import ResponseCacheConfig

DIM = 384  # the Milvus collection's default dimension, and the router's encoder width

StoreKind = Literal["redis", "milvus"]
Builder = Callable[[ResponseCacheConfig, Path], ResponseCacheStore]


@dataclass(frozen=True)
class BackendKind:
    """One row of the backend table: config keys, and the shared store under it (if any)."""

    id: str
    config: dict[str, Any]
    store: StoreKind | None = None  # None: the entries live in the backend object only
    build: Builder = open_cache_store

    @property
    def persistent(self) -> bool:
        return self.store is not None


BACKENDS: tuple[BackendKind, ...] = (
    BackendKind("memory", {"backend_type": "memory"}),
    BackendKind("memory-hnsw", {"backend_type": "memory", "use_hnsw": True}),
    BackendKind("redis", {"backend_type": "redis"}, store="redis"),
    BackendKind("milvus", {"backend_type": "milvus"}, store="milvus"),
    BackendKind("hybrid-milvus", {"backend_type": "hybrid"}, store="milvus"),
    BackendKind("hybrid-redis", {"backend_type": "hybrid", "hybrid_store": "redis"}, store="redis"),
)
PERSISTENT_BACKENDS = tuple(kind for kind in BACKENDS if kind.persistent)
# The stores themselves, without a per-process tier that could answer from its own copy.
SHARED_STORE_BACKENDS = tuple(kind for kind in PERSISTENT_BACKENDS if kind.config["backend_type"] != "hybrid")
HYBRID_BACKENDS = tuple(kind for kind in BACKENDS if kind.config["backend_type"] == "hybrid")


def store_location(
    kind: BackendKind, redis_url: Callable[[], str], milvus_uri: Callable[[], str]
) -> dict[str, Any]:
    """Config keys that point `kind` at a store location no other test uses.

    The fixtures come as callables so a memory case never starts a Redis server.
    """
    if kind.store == "redis":
        tag = uuid.uuid4().hex[:12]
        return {
            "redis": {"url": redis_url(), "index_name": f"contract_{tag}", "key_prefix": f"contract:{tag}:"}
        }
    if kind.store == "milvus":
        return {"milvus": {"uri": milvus_uri(), "collection": {"vector_field": {"dimension": DIM}}}}
    return {}


def unreachable_location(kind: BackendKind) -> dict[str, Any]:
    """Config keys that point `kind` at a closed local port, with a short timeout."""
    port = free_port()  # free now, and nothing listens on it
    if kind.store == "redis":
        return {"redis": {"url": f"redis://127.0.0.1:{port}", "timeout_seconds": 1}}
    return {"milvus": {"uri": f"http://127.0.0.1:{port}", "timeout_seconds": 1}}


@dataclass
class BackendMaker:
    """Builds backends of one kind over one store location; tuning keys are ResponseCacheConfig's."""

    kind: BackendKind
    location: dict[str, Any]
    state_dir: Path
    built: list[ResponseCacheStore] = field(default_factory=list)

    def __call__(self, **tuning: Any) -> ResponseCacheStore:
        settings = ResponseCacheConfig.model_validate(
            {"enabled": True, **self.kind.config, **self.location, **tuning}
        )
        backend = self.kind.build(settings, self.state_dir)
        self.built.append(backend)
        return backend

    def close_all(self) -> None:
        for backend in self.built:
            close = getattr(backend, "close", None)
            if callable(close):
                close()


# ---------------------------------------------------------------------- vectors and answers


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    """n random unit vectors; in 384 dimensions any two are near orthogonal (|cos| < 0.25)."""
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def at_similarity(base: np.ndarray, cos: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector whose cosine with `base` is exactly `cos` (up to float rounding)."""
    noise = rng.standard_normal(base.shape).astype(np.float64)
    b = base.astype(np.float64)
    ortho = noise - noise.dot(b) * b
    ortho /= np.linalg.norm(ortho)
    return (cos * b + np.sqrt(1 - cos**2) * ortho).astype(np.float32)


def completion(text: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{text}",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


def content(hit: CacheHit | None) -> str | None:
    return None if hit is None else hit.response["choices"][0]["message"]["content"]
