"""Knowledge bases as stored (the management store) and as the `kb` signal scores them.

A knowledge base is a named set of labelled exemplars {id, text, label, metadata?}. Two
documents per application live in the management store (app/storage/knowledge_bases.py
keeps them with the store's compare-and-set):

- `KnowledgeBasesDocument`: every base's entries and activation state (pending, active,
  failed) with the content hash of what the runtime serves (`content_hash`);
- one `KbVectors` per base: the exemplars' unit vectors from the router's encoder, tagged
  with the content hash they were computed from, so a reader never pairs vectors with other
  entries.

Scoring (`score_labels`): cosine similarity of the request's vector to every exemplar, then a
score per label: `max` (the label's best exemplar) or `knn` (similarity-weighted vote of the
`top_k` nearest; the score is the mean similarity of the winner's neighbours). docs/
knowledge-bases.md has the measurements behind the default.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator

from app.common.api_docs import NON_BLANK

KbStatus = Literal["pending", "active", "failed"]
KbOperation = Literal["create", "update", "delete"]
KB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_ENTRIES = 50_000
MAX_TEXT_CHARS = 8_000


class KbEntry(BaseModel):
    id: str | None = Field(default=None, max_length=128, description="given, else the entry's index")
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, pattern=NON_BLANK)  # in the schema too
    label: str = Field(min_length=1, max_length=128)
    metadata: dict[str, str | int | float | bool | None] | None = None

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must not be blank")
        return value


class KnowledgeBase(BaseModel):
    name: str
    description: str | None = None
    entries: list[KbEntry] = Field(default_factory=list)
    content_hash: str  # of the entries as the runtime embeds them (generated_runtime_hash)
    active_hash: str | None = None  # the content hash last activated (active_runtime_hash)
    status: KbStatus = "pending"
    operation: KbOperation = "create"
    error: str | None = None
    created_at: str
    updated_at: str
    pending_since: float | None = None  # epoch seconds; a pending base older than the timeout failed


class KnowledgeBasesDocument(BaseModel):
    revision: int = 0
    bases: dict[str, KnowledgeBase] = Field(default_factory=dict)


class KbVectors(BaseModel):
    revision: int = 0
    content_hash: str = ""
    dim: int = 0
    data: str = ""  # base64 of the (n, dim) float32 matrix, little-endian, row per entry

    def matrix(self) -> np.ndarray:
        if not self.data:
            return np.zeros((0, self.dim), dtype=np.float32)
        raw = np.frombuffer(base64.b64decode(self.data), dtype="<f4")
        return raw.reshape(-1, self.dim).astype(np.float32)

    @classmethod
    def of(cls, matrix: np.ndarray, content_hash: str, revision: int) -> KbVectors:
        matrix = np.ascontiguousarray(matrix, dtype="<f4")
        data = base64.b64encode(matrix.tobytes()).decode("ascii")
        return cls(revision=revision, content_hash=content_hash, dim=int(matrix.shape[1]), data=data)


def entry_ids(entries: list[KbEntry]) -> list[str]:
    return [e.id if e.id is not None else str(i) for i, e in enumerate(entries)]


def content_hash(name: str, entries: list[KbEntry]) -> str:
    """sha256 of what the runtime embeds and labels: name, then (id, text, label) per entry."""
    canonical = [name, [[i, e.text, e.label] for i, e in zip(entry_ids(entries), entries, strict=True)]]
    return hashlib.sha256(json.dumps(canonical, separators=(",", ":")).encode("utf-8")).hexdigest()


class LoadedKb:
    """One active base as a Router replica scores it: its matrix and labels, read once."""

    def __init__(self, base: KnowledgeBase, vectors: np.ndarray) -> None:
        self.name = base.name
        self.content_hash = base.content_hash
        self.label_names = sorted({e.label for e in base.entries})
        index = {label: i for i, label in enumerate(self.label_names)}
        labels = np.array([index[e.label] for e in base.entries], dtype=np.int64)
        # Rows grouped by label, so a label's best similarity is one reduceat (ufunc.at is slow).
        order = np.argsort(labels, kind="stable")
        self.label_index = labels[order]
        self.starts = np.searchsorted(self.label_index, np.arange(len(self.label_names)))
        self.texts = [base.entries[int(i)].text for i in order]
        # Row -> the entry it came from (the rag plugin names its passages by them).
        ids = entry_ids(base.entries)
        self.entry_index = order
        self.entry_ids = [ids[int(i)] for i in order]
        self.matrix = np.ascontiguousarray(vectors[order], dtype=np.float32)

    def __len__(self) -> int:
        return len(self.texts)


def score_labels(
    kb: LoadedKb, query: np.ndarray, method: str, top_k: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """(score by label, detail naming the nearest exemplar) of `query` against `kb`."""
    sims = kb.matrix @ query
    n_labels = len(kb.label_names)
    if method == "knn":
        k = min(top_k, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        votes = np.bincount(kb.label_index[top], weights=np.maximum(sims[top], 0.0), minlength=n_labels)
        counts = np.bincount(kb.label_index[top], minlength=n_labels)
        sums = np.bincount(kb.label_index[top], weights=sims[top], minlength=n_labels)
        winner = int(np.argmax(votes))
        scores = {kb.label_names[winner]: float(sums[winner] / max(counts[winner], 1))}
        nearest = int(top[np.argmax(sims[top])])
    else:
        best = np.maximum.reduceat(sims, kb.starts)
        scores = {label: float(best[i]) for i, label in enumerate(kb.label_names)}
        nearest = int(np.argmax(sims))
    detail = {
        "kb": kb.name,
        "nearest_label": kb.label_names[int(kb.label_index[nearest])],
        "nearest_similarity": round(float(sims[nearest]), 4),
        "nearest_text": kb.texts[nearest][:120],
    }
    return scores, detail
