"""`svc-srun train sequence-classification|token-classification --data FILE --out DIR`
(docs/model-runtime.md, "Train one"): fine-tune the packaged all-MiniLM-L6-v2 on a labelled
file and write a model directory `svc-srun run` serves (app/runtime/dir_models.py).

1. read and check the rows, hold out a seeded split (app/srun/train_data.py);
2. fine-tune the whole encoder with a new head (or the head alone, `heads_only`) on torch,
   CUDA when present, else CPU;
3. save the Hugging Face directory (config with id2label, safetensors, the base tokenizer)
   and its ONNX export, dynamic int8 (app/runtime/quantize.py), under `onnx/`;
4. evaluate both as they are served, on the held-out rows, and write the model card
   (app/srun/train_card.py).

Everything is built in a temporary directory beside `out` and renamed into place at the
end: a failed run leaves no half-written model.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.srun.train_data import Kind, LabelRow, Row, SpanRow, label_set, read_rows, split

log = logging.getLogger("svc_srun.train")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
IGNORE = -100  # torch's cross-entropy skips these positions (special tokens, padding)


@dataclass(frozen=True)
class TrainOptions:
    kind: Kind
    data: Path
    out: Path
    heads_only: bool = False
    epochs: int = 4
    batch_size: int = 16
    learning_rate: float | None = None  # 1e-4 for the whole encoder, 2e-3 for heads only
    max_length: int = 128
    eval_fraction: float = 0.2
    seed: int = 0
    device: str = "auto"
    onnx: bool = True
    base: Path | None = None  # a local encoder directory instead of the packaged MiniLM

    @property
    def lr(self) -> float:
        return self.learning_rate or (2e-3 if self.heads_only else 1e-4)


@dataclass
class Trained:
    """What the card reports about the run itself."""

    labels: list[str]  # the label set, or the entity types
    tags: list[str]  # config.json id2label, in order (BIO tags for token classification)
    train_rows: int
    held_rows: int
    device: str
    seconds: float
    final_loss: float


def tags_of(kind: Kind, labels: list[str]) -> list[str]:
    if kind == "sequence-classification":
        return labels
    return ["O", *(f"{prefix}-{t}" for t in labels for prefix in ("B", "I"))]


def token_targets(row: SpanRow, offsets: list[tuple[int, int]], tags: list[str]) -> list[int]:
    """Per token: B-X for a span's first token, I-X for its others, O outside any span;
    IGNORE for special tokens (empty offsets)."""
    out = []
    opened: set[int] = set()
    for start, end in offsets:
        if end <= start:
            out.append(IGNORE)
            continue
        tag = "O"
        for k, span in enumerate(row.spans):
            if start < span.end and end > span.start:
                tag = f"{'I' if k in opened else 'B'}-{span.label}"
                opened.add(k)
                break
        out.append(tags.index(tag))
    return out


def _device(requested: str, torch: Any) -> str:
    if requested != "auto":
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def _batches(
    rows: list[Row], tokenizer: Any, kind: Kind, tags: list[str], size: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    from app.runtime.native import pad_batch

    out = []
    for lo in range(0, len(rows), size):
        chunk = rows[lo : lo + size]
        batch = pad_batch(tokenizer, [r.text for r in chunk])
        if kind == "sequence-classification":
            targets = np.array([tags.index(r.label) for r in chunk if isinstance(r, LabelRow)], np.int64)
        else:
            targets = np.full(batch.ids.shape, IGNORE, np.int64)
            for i, r in enumerate(chunk):
                if isinstance(r, SpanRow):
                    targets[i, : batch.lengths[i]] = token_targets(r, batch.offsets[i], tags)
        out.append((batch.ids, batch.mask, targets))
    return out


def fine_tune(
    options: TrainOptions, base: Path, train_rows: list[Row], tags: list[str], target: Path
) -> float:
    """Train and save the Hugging Face directory into `target`; the last epoch's mean loss."""
    from app.runtime.native import _import_torch

    torch = _import_torch()
    import transformers
    from tokenizers import Tokenizer

    device = _device(options.device, torch)
    torch.manual_seed(options.seed)
    transformers.logging.set_verbosity_error()  # "newly initialised head" is the point here
    transformers.logging.disable_progress_bar()
    model = (
        _auto_class(options.kind)
        .from_pretrained(
            str(base),
            local_files_only=True,
            num_labels=len(tags),
            id2label=dict(enumerate(tags)),
            label2id={t: i for i, t in enumerate(tags)},
        )
        .to(device)
    )
    if options.heads_only:
        for param in model.base_model.parameters():
            param.requires_grad = False
    tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=options.max_length)
    tokenizer.no_padding()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=options.lr)
    order = np.random.default_rng(options.seed)
    loss_value = float("nan")
    model.train()
    for _epoch in range(options.epochs):
        rows = [train_rows[i] for i in order.permutation(len(train_rows))]
        losses = []
        for ids, mask, targets in _batches(rows, tokenizer, options.kind, tags, options.batch_size):
            out = model(
                input_ids=torch.from_numpy(ids).to(device),
                attention_mask=torch.from_numpy(mask).to(device),
                labels=torch.from_numpy(targets).to(device),
            )
            optimizer.zero_grad()
            out.loss.backward()
            optimizer.step()
            losses.append(float(out.loss.detach()))
        loss_value = float(np.mean(losses))
        log.info("epoch %d: loss %.4f", _epoch + 1, loss_value)
    model.eval()
    model.save_pretrained(str(target), safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copy(base / name, target / name)
    return loss_value


def _auto_class(kind: Kind) -> Any:
    from app.runtime.dir_runners import auto_class

    return auto_class("label_probabilities" if kind == "sequence-classification" else "token_spans")


def _base(directory: Path) -> Path:
    """A local encoder to fine-tune instead of the packaged MiniLM: a Hugging Face directory
    with safetensors weights and a tokenizer.json (a ModelDirError names what is wrong)."""
    from app.runtime.model_dir import ModelDirError, inspect_model_dir

    info = inspect_model_dir(directory)
    if info.format != "hf":
        raise ModelDirError(info.path, "an ONNX directory cannot be fine-tuned; give the Hugging Face one")
    return info.path


def train(options: TrainOptions) -> Path:
    """Run the whole recipe; the model directory written (`options.out`)."""
    from app.runtime.native import native_model_path
    from app.srun.train_card import evaluate_and_write_card

    out = options.out
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; name a new directory")
    rows = read_rows(options.data, options.kind)
    labels = label_set(rows)
    if options.kind == "sequence-classification" and len(labels) < 2:
        raise ValueError(f"{options.data}: one label ({labels}); a classifier needs two or more")
    train_rows, held_rows = split(rows, options.eval_fraction, options.seed)
    if not held_rows:
        raise ValueError(f"{options.data}: too few rows to hold any out")
    tags = tags_of(options.kind, labels)
    base = _base(options.base) if options.base is not None else native_model_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        started = time.perf_counter()
        loss = fine_tune(options, base, train_rows, tags, work)
        seconds = time.perf_counter() - started
        if options.onnx:
            from app.runtime.onnx_export import export_onnx

            export_onnx(work, work / "onnx")
        from app.runtime.native import _import_torch

        trained = Trained(
            labels,
            tags,
            len(train_rows),
            len(held_rows),
            _device(options.device, _import_torch()),
            seconds,
            loss,
        )
        evaluate_and_write_card(options, work, base, held_rows, trained)
        _publish(work)
        if out.exists():
            out.rmdir()
        work.rename(out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out


def _publish(work: Path) -> None:
    """The permissions a plain `mkdir` and write would have given (the temporary directory
    and some writers use 0700 / 0600): a worker run by another user must read the model."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [work, *work.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
