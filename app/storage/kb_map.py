"""The map of a knowledge base: its exemplar vectors projected to 2-D for a UI to draw.

Projection: PCA (the eigenvectors of the centred matrix's scatter, numpy) (UMAP is not installed, and PCA
is exact, deterministic and fast: docs/knowledge-bases.md has the figures). Each axis's sign
is fixed so its largest loading is positive, so the same entries always give the same map.
The metadata names the method, the two components' explained variance ratio and the bounds;
the points are streamed as NDJSON, one {id, label, x, y, text} per line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import numpy as np
from pydantic import BaseModel

from app.pipeline.signals.kb_data import KnowledgeBase, entry_ids

PREVIEW_CHARS = 120
MAP_CACHE = 8  # maps kept, by content hash (a map of 10k entries takes ~0.3 s to build)


class MapBounds(BaseModel):
    x_min: float
    x_max: float
    y_min: float
    y_max: float


class KbMapMetadata(BaseModel):
    name: str
    content_hash: str
    count: int
    dimension: int
    labels: dict[str, int]
    projection: str = "pca"
    explained_variance: list[float]
    bounds: MapBounds


class KbMapPoint(BaseModel):
    id: str
    label: str
    x: float
    y: float
    text: str


def project(matrix: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """(n, 2) coordinates and the two components' explained variance ratios."""
    n = matrix.shape[0]
    if n == 0:
        return np.zeros((0, 2)), [0.0, 0.0]
    centred = matrix.astype(np.float64) - matrix.mean(axis=0, dtype=np.float64)
    # The (d, d) scatter's eigenvectors are the SVD's right singular vectors, at a fraction of
    # the cost for n >> d (no (n, d) left factor).
    variance, vectors = np.linalg.eigh(centred.T @ centred)
    top = np.argsort(variance)[::-1][:2]
    axes = vectors[:, top].T.copy()
    for i in range(axes.shape[0]):  # sign convention: the largest loading is positive
        if axes[i, int(np.argmax(np.abs(axes[i])))] < 0:
            axes[i] = -axes[i]
    coords = centred @ axes.T
    if coords.shape[1] < 2:
        coords = np.hstack([coords, np.zeros((n, 2 - coords.shape[1]))])
    total = float(np.clip(variance, 0, None).sum())
    ratios = [float(max(variance[i], 0.0) / total) if total > 0 else 0.0 for i in top]
    ratios += [0.0] * (2 - len(ratios))
    return coords, ratios


class KbMap:
    """One base's projection, built from its entries and vectors."""

    def __init__(self, base: KnowledgeBase, matrix: np.ndarray) -> None:
        self.base = base
        self.coords, self.ratios = project(matrix)
        self.dimension = int(matrix.shape[1]) if matrix.ndim == 2 else 0

    def metadata(self) -> KbMapMetadata:
        xs, ys = self.coords[:, 0], self.coords[:, 1]
        empty = len(xs) == 0
        bounds = MapBounds(
            x_min=0.0 if empty else round(float(xs.min()), 6),
            x_max=0.0 if empty else round(float(xs.max()), 6),
            y_min=0.0 if empty else round(float(ys.min()), 6),
            y_max=0.0 if empty else round(float(ys.max()), 6),
        )
        return KbMapMetadata(
            name=self.base.name,
            content_hash=self.base.content_hash,
            count=len(self.base.entries),
            dimension=self.dimension,
            labels=dict(sorted(Counter(e.label for e in self.base.entries).items())),
            explained_variance=[round(r, 6) for r in self.ratios],
            bounds=bounds,
        )

    def lines(self) -> Iterator[bytes]:
        """The points, one JSON object per line."""
        ids = entry_ids(self.base.entries)
        for ident, entry, (x, y) in zip(ids, self.base.entries, self.coords, strict=True):
            point = KbMapPoint(
                id=ident,
                label=entry.label,
                x=round(float(x), 6),
                y=round(float(y), 6),
                text=entry.text[:PREVIEW_CHARS],
            )
            yield (json.dumps(point.model_dump(), ensure_ascii=False) + "\n").encode("utf-8")


class MapCache:
    """The last few maps by content hash (a base's map changes only with its entries)."""

    def __init__(self, size: int = MAP_CACHE) -> None:
        self.size = size
        self._maps: dict[str, KbMap] = {}

    def get(self, base: KnowledgeBase, matrix_of: np.ndarray) -> KbMap:
        found = self._maps.get(base.content_hash)
        if found is None:
            found = KbMap(base, matrix_of)
            self._maps[base.content_hash] = found
            while len(self._maps) > self.size:
                self._maps.pop(next(iter(self._maps)))
        return found
