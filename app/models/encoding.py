"""What the model heads need from a sentence encoder: the contract `MiniLMEncoder` (ONNX)
and `NativeMiniLMEncoder` (torch) both meet, so every head runs on either engine. Declared
here, beside the heads, so app.models needs nothing from app.runtime to be typed."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Encoder(Protocol):
    """Unit-length sentence vectors, one row per text, truncated at `max_tokens`."""

    max_tokens: int

    def encode(self, texts: list[str]) -> np.ndarray: ...

    def count_tokens(self, text: str) -> int: ...

    def warm_up(self) -> None: ...
