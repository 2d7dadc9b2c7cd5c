"""The model card `svc-srun train` writes (docs/model-runtime.md, "Train one"): the held-out
rows evaluated on the directory as `svc-srun run` serves it (native fp32) and on its ONNX
int8 export (onnxruntime), with latency measured on this machine; `training.json` holds the
card's data and `README.md` renders it.

Sequence classification: accuracy (95% Wilson interval) and precision / recall / F1 per
label. Token classification: entity-level F1 per type, a span counting only when its type,
start and end are the gold one's. The ONNX export reports the same figures plus its
agreement with the fp32 answers (same label, or the same span set, per row).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from app.common.digest import file_sha256
from app.common.intervals import wilson
from app.runtime.engine import RuntimeModel
from app.srun.train_data import LabelRow, Row, SpanRow, data_digest

if TYPE_CHECKING:
    from app.srun.train import Trained, TrainOptions

LATENCY_SAMPLES = 64  # single-text calls timed per engine (held-out texts, cycled)


class LabelScore(BaseModel):
    label: str
    precision: float
    recall: float
    f1: float
    support: int


class EngineEval(BaseModel):
    engine: str
    directory: str  # relative to the model directory: "." or "onnx"
    accuracy: float | None = None  # sequence classification
    accuracy_interval: tuple[float, float] | None = None
    micro_f1: float
    macro_f1: float
    per_label: list[LabelScore]
    agreement_with_fp32: float | None = None
    p50_ms: float
    p99_ms: float
    latency_samples: int


class TrainingCard(BaseModel):
    kind: str
    labels: list[str]
    base: dict[str, str | None]
    data: dict[str, str | int]
    split: dict[str, float | int]
    training: dict[str, str | int | float | bool]
    evaluations: list[EngineEval]
    created: str
    machine: str


def _scores(counts: dict[str, list[int]]) -> tuple[list[LabelScore], float, float]:
    """Per label from [true positives, false positives, false negatives]; micro and macro F1."""
    scores = []
    for label, (tp, fp, fn) in sorted(counts.items()):
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores.append(LabelScore(label=label, precision=precision, recall=recall, f1=f1, support=tp + fn))
    tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
    micro = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    macro = float(np.mean([s.f1 for s in scores])) if scores else 0.0
    return scores, micro, macro


def _answers(model: RuntimeModel, held: list[Row]) -> list[object]:
    """The served answer per held-out row: a label, or a frozenset of (type, start, end)."""
    result = model.classify([r.text for r in held], {"overflow": "truncate"})
    out: list[object] = []
    for item in result.results:
        if item.spans is not None:
            out.append(frozenset((s.label, s.start, s.end) for s in item.spans))
        else:
            out.append(item.label)
    return out


def _counts(held: list[Row], answers: list[object], labels: list[str]) -> dict[str, list[int]]:
    counts = {label: [0, 0, 0] for label in labels}
    for row, answer in zip(held, answers, strict=True):
        if isinstance(row, LabelRow):
            gold: set[tuple[str, int, int] | str] = {row.label}
            got: set[tuple[str, int, int] | str] = {answer} if isinstance(answer, str) else set()
        else:
            gold = {(s.label, s.start, s.end) for s in row.spans} if isinstance(row, SpanRow) else set()
            got = set(answer) if isinstance(answer, frozenset) else set()
        for item in got | gold:
            label = item if isinstance(item, str) else item[0]
            slot = counts.setdefault(label, [0, 0, 0])
            slot[0 if item in got and item in gold else 1 if item in got else 2] += 1
    return counts


def _latency(model: RuntimeModel, texts: list[str]) -> tuple[float, float, int]:
    samples = []
    for i in range(LATENCY_SAMPLES):
        started = time.perf_counter()
        model.classify(texts[i % len(texts)])
        samples.append((time.perf_counter() - started) * 1000.0)
    return float(np.percentile(samples, 50)), float(np.percentile(samples, 99)), len(samples)


def evaluate(
    directory: Path, where: str, held: list[Row], labels: list[str], fp32: list[object] | None
) -> tuple[EngineEval, list[object]]:
    from app.runtime.registry import load_model

    model = load_model(str(directory), engine="native" if where == "." else "onnxruntime")
    answers = _answers(model, held)
    per_label, micro, macro = _scores(_counts(held, answers, labels))
    accuracy = interval = None
    if held and isinstance(held[0], LabelRow):
        hits = sum(1 for r, a in zip(held, answers, strict=True) if isinstance(r, LabelRow) and r.label == a)
        accuracy, interval = hits / len(held), wilson(hits, len(held))
    agreement = None
    if fp32 is not None:
        agreement = sum(1 for a, b in zip(answers, fp32, strict=True) if a == b) / len(held)
    p50, p99, n = _latency(model, [r.text for r in held])
    report = EngineEval(
        engine=model.card.engine or "",
        directory=where,
        accuracy=accuracy,
        accuracy_interval=interval,
        micro_f1=micro,
        macro_f1=macro,
        per_label=per_label,
        agreement_with_fp32=agreement,
        p50_ms=p50,
        p99_ms=p99,
        latency_samples=n,
    )
    return report, answers


def evaluate_and_write_card(
    options: TrainOptions, work: Path, base: Path, held: list[Row], trained: Trained
) -> TrainingCard:
    labels = trained.labels
    native, fp32 = evaluate(work, ".", held, labels, None)
    evaluations = [native]
    if (work / "onnx").is_dir():
        evaluations.append(evaluate(work / "onnx", "onnx", held, labels, fp32)[0])
    card = TrainingCard(
        kind=options.kind,
        labels=trained.tags,
        base=base_of(options, base),
        data={
            "file": options.data.name,
            "digest": data_digest(options.data),
            "rows": trained.train_rows + trained.held_rows,
        },
        split={
            "seed": options.seed,
            "eval_fraction": options.eval_fraction,
            "train": trained.train_rows,
            "held_out": trained.held_rows,
        },
        training={
            "heads_only": options.heads_only,
            "epochs": options.epochs,
            "batch_size": options.batch_size,
            "learning_rate": options.lr,
            "max_length": options.max_length,
            "device": trained.device,
            "seconds": round(trained.seconds, 2),
            "final_loss": round(trained.final_loss, 5),
        },
        evaluations=evaluations,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
    )
    (work / "training.json").write_text(card.model_dump_json(indent=2) + "\n")
    (work / "README.md").write_text(render(card, options.out.name))
    return card


def base_of(options: TrainOptions, base: Path) -> dict[str, str | None]:
    """What the model was fine-tuned from: the packaged MiniLM, or `--base DIR`; the weights' sha256."""
    from app.runtime.model_dir import inspect_model_dir
    from app.runtime.native import NATIVE_PACKAGE

    weights = inspect_model_dir(base).weights
    if options.base is not None:
        return {"model": str(base), "package": None, "version": None, "sha256": file_sha256(weights)}
    try:
        version = importlib.metadata.version(NATIVE_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "package": NATIVE_PACKAGE,
        "version": version,
        "sha256": file_sha256(weights),
    }


def render(card: TrainingCard, name: str) -> str:
    """The card as Markdown (README.md of the model directory)."""
    lines = [
        f"# {name}",
        "",
        f"A {card.kind} model fine-tuned by `svc-srun train` from {card.base['model']}"
        + (f" ({card.base['package']}=={card.base['version']})" if card.base["package"] else "")
        + f", {card.created}.",
        "",
        "## Data",
        "",
        f"- file `{card.data['file']}`, {card.data['digest']}, {card.data['rows']} rows",
        f"- held out: {card.split['held_out']} rows ({card.split['eval_fraction']:.0%}, seed {card.split['seed']}), "
        f"trained on {card.split['train']}",
        f"- labels: {', '.join(card.labels)}",
        "",
        "## Training",
        "",
        "- " + ", ".join(f"{k} {v}" for k, v in card.training.items()),
        "",
        "## Held-out results",
        "",
    ]
    for ev in card.evaluations:
        head = f"### {ev.engine} (`{ev.directory}`)"
        lines += [head, ""]
        if ev.accuracy is not None and ev.accuracy_interval is not None:
            low, high = ev.accuracy_interval
            lines.append(f"- accuracy {ev.accuracy:.3f} (95% interval {low:.3f} to {high:.3f})")
        lines.append(f"- micro F1 {ev.micro_f1:.3f}, macro F1 {ev.macro_f1:.3f}")
        if ev.agreement_with_fp32 is not None:
            lines.append(f"- agreement with the fp32 answers: {ev.agreement_with_fp32:.3f}")
        lines.append(
            f"- latency on {card.machine}: p50 {ev.p50_ms:.2f} ms, p99 {ev.p99_ms:.2f} ms "
            f"({ev.latency_samples} single-text calls)"
        )
        lines += ["", "| label | precision | recall | F1 | support |", "|---|---|---|---|---|"]
        lines += [
            f"| {s.label} | {s.precision:.3f} | {s.recall:.3f} | {s.f1:.3f} | {s.support} |"
            for s in ev.per_label
        ]
        lines.append("")
    return "\n".join(lines)
