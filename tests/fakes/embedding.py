"""A deterministic stand-in for the sentence encoder: hashed bag of words, unit length.

Texts sharing words point the same way, so nearest-neighbour search behaves like a crude
lexical similarity: enough to test ranking, filters and fusion without loading a model."""

from __future__ import annotations

import hashlib
import re

import numpy as np

DIM = 256


def hashed_embed(texts: list[str], dim: int = DIM) -> np.ndarray:
    out = np.zeros((len(texts), dim), np.float32)
    for row, text in enumerate(texts):
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            out[row, int.from_bytes(digest, "little") % dim] += 1.0
        norm = np.linalg.norm(out[row])
        out[row] /= norm if norm else 1.0
    return out
