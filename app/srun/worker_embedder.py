"""The `embedding` binding's encoder: a `model_deployments` entry's workers as the router's
semantic vector space (docs/model-runtime.md "Bindings to your own models").

The embedding signal rules and the response cache read its vectors; the learned heads keep the
graph's MiniLM vector they were trained on. A request's texts go as one `/v1/embeddings` call
through the host (`ManagedRuntimes.signal`: the signal deadline, the deployment's served
model). `identity` names the encoder that answers: the worker card's digest (a sha256 over the
files it loaded, so a directory rewritten in place is another encoder), else its name and
revision. The response cache keys its partitions by it, so entries written with one encoder are
never matched with another's vectors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the host type only: the pipeline need not import the supervisor
    from app.srun.hosting import ManagedRuntimes

IDENTITY_CHARS = 16  # of the digest's hex: unique enough among one cache's encoders


class WorkerEmbedder:
    """`deployment`'s workers (through `host`) as an `EmbedFn` with the encoder's identity."""

    def __init__(self, deployment: str, host: ManagedRuntimes | None) -> None:
        self.name = f"embedding ({deployment})"
        self.deployment = deployment
        self.host = host
        self._identity: str | None = None

    @property
    def identity(self) -> str:
        """The encoder's identity (read by `warm_up`; the deployment's name before it)."""
        return self._identity or f"deployment:{self.deployment}"

    async def warm_up(self) -> None:
        """Read the served model's card: its identity keys the cache partitions from the first request."""
        if self._identity is not None or self.host is None:  # no host: every call errs anyway
            return
        served = self.host.supervisor.served_name(self.deployment)
        listing = await self.host.supervisor.client_for(self.deployment).models()
        cards = [c for c in listing.get("data") or [] if isinstance(c, dict)]
        card = next((c for c in cards if served in (c.get("served_name"), c.get("name"))), None)
        if card is None and len(cards) == 1:
            card = cards[0]
        if card is None:
            raise RuntimeError(f"{self.name}: the worker serves no model {served!r}")
        self._identity = card_identity(card)

    async def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) unit vectors, in input order; raises when no usable answer came."""
        if self.host is None:
            raise RuntimeError(f"{self.name}: no model runtime host")
        result = await self.host.signal(self.deployment, "embeddings", {"input": list(texts)}, None)
        if result.state != "ok":
            raise RuntimeError(f"{self.name}: {result.error}")
        return vectors_of(result.answer, len(texts), self.name)


def card_identity(card: dict[str, Any]) -> str:
    """`sha256:<16 hex>` of the loaded files, else `<name>@<revision>` (a built-in's name)."""
    digest = str(card.get("digest") or "").removeprefix("sha256:")
    if digest:
        return f"sha256:{digest[:IDENTITY_CHARS]}"
    name = str(card.get("name") or card.get("served_name") or "unknown")
    return f"{name}@{card['revision']}" if card.get("revision") else name


def vectors_of(answer: dict[str, Any] | None, count: int, where: str) -> np.ndarray:
    """The `/v1/embeddings` answer's vectors by `index`; RuntimeError for a partial or failed one."""
    data = (answer or {}).get("data")
    if not isinstance(data, list) or len(data) != count:
        raise RuntimeError(f"{where}: answer without one embedding per input")
    rows: list[Any] = [None] * count
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or not item.get("embedding"):
            raise RuntimeError(f"{where}: item error {item.get('error') if isinstance(item, dict) else item}")
        rows[index] = item["embedding"]
    if any(row is None for row in rows):
        raise RuntimeError(f"{where}: answer without one embedding per input")
    return np.asarray(rows, dtype=np.float32)
