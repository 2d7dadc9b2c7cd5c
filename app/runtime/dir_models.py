"""A user's model directory as a runtime model (docs/model-runtime.md, "Your own models"):
`load_model_dir(ref)` resolves and checks the directory (app/runtime/model_dir.py), runs it on
the engine its format allows (app/runtime/dir_runners.py) and wraps it in the task classes
every host already serves, with the directory's own labels:

- label_probabilities: `DirLabelModel`, softmax over config.json's id2label;
- token_spans: `DirSpanModel`, one span per entity: words tagged B-X / I-X (or the same plain
  label in a row) merged, offsets in code points of the input, probability the mean of the
  words' tag probabilities;
- embeddings: app/runtime/tasks.py's `EmbeddingModel` over `DirEncoder` (pooled as the
  directory says, unit length);
- rerank: `DirCrossEncoder`, a cross-encoder's logit per (query, passage) pair, which
  svc-srun serves on /v1/rerank (app/srun/cross_encoder.py).

Windows, budgets, usage and answers are the runtime's own (`TaskModel`), so a directory
serves /v1/classify and /v1/embeddings exactly as a built-in does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from app.runtime.dir_runners import OrtRunner, RowOutput, Runner, TorchRunner, pool
from app.runtime.engine import RuntimeModel, TaskModel
from app.runtime.limits import Segment, TextTokenizer
from app.runtime.model_dir import ModelDirError, ModelDirInfo, inspect_model_dir, resolve_model_ref
from app.runtime.schemas import CardLimits, EngineName, InvalidRequest, ModelCard, NotReady, Span
from app.runtime.tasks import EmbeddingModel, check_distribution, probabilities_answer, spans_answer

MAX_SCAN_TOKENS = 32_768
ONNX_EXPORT = "onnx"  # where a Hugging Face directory keeps its ONNX export
SELF_CHECK_TEXT = "Please write to me about the weather in Paris."


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True), np.float64)


class DirLabelModel(TaskModel):
    """A sequence classifier: probabilities over its own labels."""

    def __init__(self, card: ModelCard, tokenizer: TextTokenizer, runner: Runner) -> None:
        super().__init__(card, tokenizer)
        self.runner = runner

    def _forward_rows(self, texts: list[str]) -> list[tuple[np.ndarray, str]]:
        out = []
        for row in self.runner.run(texts):
            probs = softmax(row.values)
            out.append((probs, self.card.labels[int(np.argmax(probs))]))
        return out

    def _answer(self, text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
        return probabilities_answer(self.card.labels, pieces)

    def self_check(self) -> None:
        probs, _ = self._forward_rows([SELF_CHECK_TEXT])[0]
        check_distribution(probs, len(self.card.labels))


class DirSpanModel(TaskModel):
    """A token classifier: entity spans labelled with its entity types (the card's labels;
    `tags` are config.json's id2label, B-/I- prefixed or plain)."""

    def __init__(self, card: ModelCard, tokenizer: TextTokenizer, runner: Runner, tags: list[str]) -> None:
        super().__init__(card, tokenizer)
        self.runner = runner
        self.tags = tags

    def _forward_rows(self, texts: list[str]) -> list[list[Span]]:
        return [
            decode_spans(text, row, self.tags)
            for text, row in zip(texts, self.runner.run(texts), strict=True)
        ]

    def _answer(self, text: str, pieces: list[tuple[Segment, Any]]) -> dict[str, Any]:
        return spans_answer(text, pieces)

    def self_check(self) -> None:
        [row] = self.runner.run([SELF_CHECK_TEXT])
        if row.values.ndim != 2 or row.values.shape[1] != len(self.tags):
            raise RuntimeError(
                f"token classifier answers shape {row.values.shape}, not (tokens, {len(self.tags)})"
            )


def decode_spans(text: str, row: RowOutput, labels: list[str]) -> list[Span]:
    """Entity spans of one text: each word takes its first token's tag; a B- tag (or a new
    type) opens a span, I- or the same plain type continues it, O closes it."""
    probs = softmax(row.values)
    words: dict[int, tuple[int, int, int, float]] = {}  # word -> (start, end, tag, probability)
    for token, word in enumerate(row.word_ids):
        if word is None or row.special[token]:
            continue
        start, end = row.offsets[token]
        if word in words:
            first = words[word]
            words[word] = (first[0], max(first[1], end), first[2], first[3])
        else:
            tag = int(np.argmax(probs[token]))
            words[word] = (start, end, tag, float(probs[token, tag]))
    spans: list[Span] = []
    current: list[Any] | None = None  # [type, start, end, probabilities]
    for start, end, tag, prob in (words[w] for w in sorted(words)):
        label = labels[tag]
        kind = label[2:] if label[:2] in ("B-", "I-") else label
        if label == "O" or kind == "O":
            _close(text, current, spans)
            current = None
            continue
        if current is not None and kind == current[0] and not label.startswith("B-"):
            current[2], current[3] = end, [*current[3], prob]
            continue
        _close(text, current, spans)
        current = [kind, start, end, [prob]]
    _close(text, current, spans)
    return spans


def _close(text: str, current: list[Any] | None, spans: list[Span]) -> None:
    if current is not None:
        kind, start, end, probs = current
        spans.append(
            Span(
                label=kind,
                start=start,
                end=end,
                text=text[start:end],
                probability=min(1.0, float(np.mean(probs))),
            )
        )


class DirCrossEncoder(TaskModel):
    """A cross-encoder: one relevance logit per (query, passage) pair. Its surface is svc-srun's
    /v1/rerank (app/srun/cross_encoder.py), so classify and embeddings answer
    unsupported_surface as for any model that lacks them."""

    def __init__(self, card: ModelCard, tokenizer: TextTokenizer, runner: Runner) -> None:
        super().__init__(card, tokenizer)
        self.runner = runner

    def score(self, pairs: list[tuple[str, str]]) -> list[tuple[float, int, bool]]:
        """Each pair's logit, the tokens read and whether the pair was cut to the card's budget."""
        return [
            (float(row.values.reshape(-1)[0]), len(row.offsets), row.truncated)
            for row in self.runner.run(pairs)
        ]

    def warm_up(self) -> None:
        self.score([("warm up", SELF_CHECK_TEXT), ("a longer query to warm the model up " * 3, "x")])

    def self_check(self) -> None:
        [row] = self.runner.run([("the weather", SELF_CHECK_TEXT)])
        if row.values.shape != (1,) or not np.isfinite(row.values).all():
            raise RuntimeError(f"cross-encoder answers shape {row.values.shape}, not one finite logit")


class DirEncoder:
    """A directory's sentence encoder as the runtime's `Encoder`: pooled, unit length."""

    def __init__(self, runner: Runner, tokenizer: TextTokenizer, info: ModelDirInfo) -> None:
        self.runner = runner
        self.max_tokens = info.max_tokens
        self._tokenizer = tokenizer
        self._pooling = info.pooling or "mean"
        self.dim = info.dimensions

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([pool(row.values, self._pooling) for row in self.runner.run(texts)])

    def count_tokens(self, text: str) -> int:
        return min(self._tokenizer.count(text), self.max_tokens)

    def warm_up(self) -> None:
        self.encode(["warm up", SELF_CHECK_TEXT])


# --------------------------------------------------------------------------- loading


def engines_of(info: ModelDirInfo) -> tuple[EngineName, ...]:
    """An ONNX directory runs on onnxruntime; a Hugging Face one on torch, and on onnxruntime
    too when it holds its ONNX export in `onnx/` (as `svc-srun train` writes it)."""
    if info.format == "onnx":
        return ("onnxruntime",)
    if (info.path / ONNX_EXPORT / "model.onnx").is_file():
        return ("onnxruntime", "native")
    return ("native",)


def pick_dir_engine(info: ModelDirInfo, engine: str, device: str) -> EngineName:
    offered = engines_of(info)
    if engine == "auto":
        # As for the built-ins: int8 onnxruntime on CPU when there is an export, torch on GPUs.
        return "native" if device != "cpu" and "native" in offered else offered[0]
    for name in offered:
        if name == engine:
            return name
    kind = "an ONNX" if info.format == "onnx" else "a Hugging Face"
    raise InvalidRequest(f"engine {engine!r}: {info.path} is {kind} directory; engines: {', '.join(offered)}")


def _onnx_export(info: ModelDirInfo) -> ModelDirInfo:
    """The ONNX export a Hugging Face directory holds, served under the directory's name."""
    export = inspect_model_dir(info.path / ONNX_EXPORT)
    if (export.task, export.labels) != (info.task, info.labels):
        raise ModelDirError(export.path, f"the ONNX export's task or labels are not those of {info.path}")
    export.name = info.name
    return export


def dir_card(info: ModelDirInfo, tokenizer: TextTokenizer, engine: EngineName, device: str) -> ModelCard:
    embeddings = info.task == "embeddings"
    return ModelCard(
        name=info.name,
        description=f"{info.architecture} ({info.format}) from {info.path}",
        task=info.task,
        surfaces=["embeddings" if embeddings else "rerank" if info.task == "rerank" else "classify"],
        labels=info.served_labels,
        engines=list(engines_of(info)),
        engine=engine,
        dimensions=[info.dimensions] if embeddings else [],
        representation=f"{info.name}/{info.pooling}/l2@{info.digest[7:19]}" if embeddings else None,
        revision=info.revision,
        digest=info.digest,
        artifacts=info.artifacts,
        limits=CardLimits(
            max_input_tokens=info.max_tokens,
            max_scan_tokens=MAX_SCAN_TOKENS,
            truncate_tokens=info.max_tokens,
            max_chars_per_token=tokenizer.max_chars_per_token,
        ),
        device=device,
    )


def load_model_dir(
    ref: str, engine: str = "auto", device: str = "cpu", *, warm: bool = True, cache_dir: Path | None = None
) -> RuntimeModel:
    """Load a model directory (or ORG/NAME@COMMIT from the hub cache). ModelDirError (a
    NotReady naming the path and reason) for a directory that cannot serve; InvalidRequest
    for an engine or device it cannot use; NotReady when it answers nonsense."""
    info = inspect_model_dir(resolve_model_ref(ref, cache_dir))
    device = (device or "cpu").strip().lower()
    chosen = pick_dir_engine(info, engine, device)
    if chosen == "onnxruntime" and device != "cpu":
        raise InvalidRequest(f"device {device!r}: the onnxruntime engine runs on cpu only here")
    engines = engines_of(info)
    if chosen == "onnxruntime" and info.format == "hf":
        info = _onnx_export(info)
    tokenizer = TextTokenizer(info.tokenizer)
    card = dir_card(info, tokenizer, chosen, device)
    card.engines = list(engines)
    card.status = "loading"
    try:
        runner: Runner = OrtRunner(info) if chosen == "onnxruntime" else TorchRunner(info, device)
    except ValueError as exc:  # check_device: a device torch cannot use
        if isinstance(exc, ModelDirError):
            raise
        raise InvalidRequest(str(exc)) from None
    except Exception as exc:  # weights cut short or damaged: failed at once, never retried
        raise ModelDirError(info.weights, f"the weights do not load: {type(exc).__name__}: {exc}") from exc
    model: TaskModel
    if info.task == "label_probabilities":
        model = DirLabelModel(card, tokenizer, runner)
    elif info.task == "token_spans":
        model = DirSpanModel(card, tokenizer, runner, info.labels)
    elif info.task == "rerank":
        model = DirCrossEncoder(card, tokenizer, runner)
    else:
        model = EmbeddingModel(card, tokenizer, DirEncoder(runner, tokenizer, info))
    try:
        if warm:
            card.status = "warming"
            model.warm_up()
        model.self_check()
    except Exception as exc:  # weights that load but answer in the wrong shape
        card.status, card.status_message = "failed", f"{type(exc).__name__}: {exc}"
        raise NotReady(f"{info.path} failed its self-check: {card.status_message}") from exc
    card.status = "ready"
    return model
