"""Run a model directory's network on token ids: `TorchRunner` (the `native` engine: a
Hugging Face directory on torch, CPU or CUDA) and `OrtRunner` (the `onnxruntime` engine: an
ONNX export, CPU). Both answer `run(texts) -> list[RowOutput]`, one per text: the network's
raw output (logits per text for a sequence classifier, per token for a token classifier,
token states for an encoder) and the token offsets and word ids behind it.

The tokenizer truncates at the directory's `max_tokens`; the task models hand in texts the
runtime's budgets already cut to fit, so truncation is a safety net, not a policy. A
cross-encoder's items are (query, passage) pairs, encoded with the tokenizer's pair template
and token type ids, cut longest-first to fit as sentence-transformers' CrossEncoder does.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.runtime.encoder import row_feeds
from app.runtime.model_dir import ModelDirError, ModelDirInfo

Item = str | tuple[str, str]  # a text, or a cross-encoder's (query, passage) pair


@dataclass
class RowOutput:
    values: np.ndarray  # (labels,) for sequence classification; (tokens, width) otherwise
    offsets: list[tuple[int, int]]  # per token, code points into the text
    word_ids: list[int | None]  # per token; None for special tokens
    special: list[bool]
    truncated: bool = False  # the tokenizer cut the text (or pair) at max_tokens


class Runner(Protocol):
    def run(self, texts: Sequence[Item]) -> list[RowOutput]: ...


def load_tokenizer(info: ModelDirInfo) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(info.tokenizer))
    tok.enable_truncation(max_length=info.max_tokens)
    tok.no_padding()
    return tok


def _row(values: np.ndarray, enc: Any) -> RowOutput:
    return RowOutput(
        values,
        list(enc.offsets),
        list(enc.word_ids),
        [bool(s) for s in enc.special_tokens_mask],
        bool(enc.overflowing),
    )


def auto_class(task: str) -> Any:
    """The transformers class that loads a directory of `task`."""
    import transformers

    if task in ("label_probabilities", "rerank"):
        return transformers.AutoModelForSequenceClassification
    if task == "token_spans":
        return transformers.AutoModelForTokenClassification
    return transformers.AutoModel


class TorchRunner:
    """The directory's transformers class on torch: padded batches, fp32, one lock per model."""

    def __init__(self, info: ModelDirInfo, device: str) -> None:
        from app.runtime.native import _import_torch, _load_quietly, check_device

        torch = _import_torch()
        self._torch = torch
        self.device = check_device(device)
        threads = os.environ.get("SVC_SR_ENCODER_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
        try:
            model = _load_quietly(auto_class(info.task), info.path)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ModelDirError(info.path, f"weights do not load as {info.architecture}: {exc}") from None
        self._model = model.eval().to(self.device)
        self._types = "token_type_ids" in inspect.signature(self._model.forward).parameters
        self._task = info.task
        self._tokenizer = load_tokenizer(info)
        self._lock = threading.Lock()

    def run(self, texts: Sequence[Item]) -> list[RowOutput]:
        from app.runtime.native import pad_batch

        torch = self._torch
        batch = pad_batch(self._tokenizer, texts)
        ids = torch.from_numpy(batch.ids).to(self.device)
        feeds = {"input_ids": ids, "attention_mask": torch.from_numpy(batch.mask).to(self.device)}
        encodings = self._tokenizer.encode_batch(list(texts))
        if self._types:  # all 0 for single texts; 1 over a pair's second text
            types = np.zeros_like(batch.ids)
            for i, enc in enumerate(encodings):
                types[i, : batch.lengths[i]] = enc.type_ids
            feeds["token_type_ids"] = torch.from_numpy(types).to(self.device)
        with self._lock, torch.inference_mode():
            out = self._model(**feeds)
            tensor = out.last_hidden_state if self._task == "embeddings" else out.logits
            values = tensor.float().cpu().numpy()
        rows = []
        for i, enc in enumerate(encodings):
            per_text = self._task in ("label_probabilities", "rerank")
            rows.append(_row(values[i] if per_text else values[i, : batch.lengths[i]], enc))
        return rows


class OrtRunner:
    """An ONNX export on onnxruntime, CPU. Each text runs as its own unpadded row: a
    dynamically quantized model scales activations per run, so a row must not move with
    its batch-mates (the built-in encoder does the same, app/runtime/encoder.py)."""

    def __init__(self, info: ModelDirInfo) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("SVC_SR_ENCODER_THREADS", "1"))
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = ort.InferenceSession(
                str(info.weights), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own types for a damaged graph
            raise ModelDirError(info.weights, f"not a loadable ONNX model: {exc}") from None
        self._inputs = {i.name for i in self._session.get_inputs()}
        if "input_ids" not in self._inputs:
            raise ModelDirError(info.weights, f"ONNX inputs {sorted(self._inputs)} have no input_ids")
        self._tokenizer = load_tokenizer(info)
        self._lock = threading.Lock()

    def run(self, texts: Sequence[Item]) -> list[RowOutput]:
        rows = []
        for enc in self._tokenizer.encode_batch(list(texts)):
            feeds = row_feeds(enc.ids, self._inputs)
            if "token_type_ids" in feeds:  # a pair's second text is type 1
                feeds["token_type_ids"] = np.asarray([enc.type_ids], dtype=np.int64)
            with self._lock:
                out = self._session.run(None, feeds)[0]
            rows.append(_row(np.asarray(out[0], np.float32), enc))
        return rows


def pool(states: np.ndarray, mode: str) -> np.ndarray:
    """One unit-length vector from token states (sentence-transformers pools every token,
    [CLS] and [SEP] included, under the attention mask; `cls` takes the first)."""
    if mode == "cls":
        vector = states[0]
    elif mode == "max":
        vector = states.max(axis=0)
    else:
        vector = states.mean(axis=0)
    norm = float(np.linalg.norm(vector))
    return (vector / max(norm, 1e-12)).astype(np.float32)
