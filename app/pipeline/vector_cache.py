"""Text -> sentence vector, a bounded LRU over one encoder: texts that recur across requests
(tool descriptions, a system prompt's or a retrieved passage's sentences) are embedded once.
Texts come from clients, so the cache is bounded (least recently used first out)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from app.pipeline.signals.base import EmbedFn


class TextVectorCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, text: str) -> np.ndarray | None:
        vector = self._vectors.get(text)
        if vector is not None:
            self._vectors.move_to_end(text)
        return vector

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Keep `vectors[i]` for `texts[i]`, then evict down to capacity."""
        if len(vectors) != len(texts):
            raise RuntimeError(f"embedding returned {len(vectors)} vectors for {len(texts)} texts")
        for text, vector in zip(texts, vectors, strict=True):
            self._vectors[text] = vector
            self._vectors.move_to_end(text)
        while len(self._vectors) > self.capacity:
            self._vectors.popitem(last=False)

    async def vectors(self, texts: list[str], embed: EmbedFn) -> tuple[np.ndarray, int]:
        """(len(texts), dim) vectors and the number of embed calls made (0 or 1)."""
        found = {t: v for t in dict.fromkeys(texts) if (v := self.get(t)) is not None}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if not missing:
            return np.stack([found[t] for t in texts]), 0
        fresh = np.asarray(await embed(missing), dtype=np.float32)
        self.put(missing, fresh)
        found.update(zip(missing, fresh, strict=True))  # kept here even if evicted just now
        return np.stack([found[t] for t in texts]), 1
