"""The ordinary rows in twelve languages outside Europe's scripts
(tests/data/guard/multilingual_everyday_world.jsonl; docs/security.md, "Multilingual rows"): written
for the multilingual guard's training and tuning, one of scripts/guard_data.py `MULTILINGUAL_FILES`
(its held-out third in tests/data/guard/heldout/multilingual.jsonl). Fields and split as multilingual_everyday.jsonl; each language in its own script;
no text shared with any set under tests/data."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.unit.models.test_multilingual_rows import NEAR_MISS, folded

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import guard_data as gd  # noqa: E402

WORLD = gd.GUARD_DATA / "multilingual_everyday_world.jsonl"
PER_LANGUAGE = 50
# a code-point range every row of the language holds (Turkish: a letter English lacks)
SCRIPTS = {
    "zh": r"[\u4e00-\u9fff]",  # CJK ideographs
    "ja": r"[\u3040-\u30ff]",  # kana: tells Japanese from Chinese
    "ko": r"[\uac00-\ud7af]",  # Hangul syllables
    "ru": r"[\u0400-\u04ff]",
    "uk": r"[\u0400-\u04ff]",
    "ar": r"[\u0600-\u06ff]",
    "fa": r"[\u0600-\u06ff]",
    "hi": r"[\u0900-\u097f]",  # Devanagari
    "el": r"[\u0370-\u03ff]",
    "he": r"[\u0590-\u05ff]",
    "th": r"[\u0e00-\u0e7f]",
    "tr": r"[çğıöşüÇĞİÖŞÜ]",
}
# near-misses here: the everyday file's, plus the kinds an English guard refused in other scripts
WORLD_NEAR_MISS = NEAR_MISS | {"networking", "nearmiss_code", "victim_help", "agent"}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return gd.read_jsonl(WORLD)


def test_fields_labels_and_fifty_per_language(rows: list[dict]) -> None:
    for r in rows:
        assert set(r) == {"text", "language", "topic", "label", "split"}, r
        assert r["label"] == "benign" and r["text"].strip() and r["topic"], r
    assert Counter(r["language"] for r in rows) == {lang: PER_LANGUAGE for lang in SCRIPTS}


def test_split_is_the_multilingual_rule(rows: list[dict]) -> None:
    for r in rows:
        held = gd.is_heldout(r["text"], gd.MULTILINGUAL_SALT, gd.MULTILINGUAL_HELDOUT)
        assert r["split"] == ("heldout" if held else "train"), r["text"]
    share = sum(r["split"] == "heldout" for r in rows) / len(rows)
    assert 0.25 <= share <= 0.42, share


def test_every_row_is_in_its_languages_script(rows: list[dict]) -> None:
    wrong = [r["text"] for r in rows if not re.search(SCRIPTS[r["language"]], r["text"])]
    assert not wrong
    # Ukrainian has none of Russian's ы э ъ ё; Persian rows use letters Arabic lacks
    assert not [r["text"] for r in rows if r["language"] == "uk" and re.search("[ыэъёЫЭЪЁ]", r["text"])]
    persian = [r for r in rows if r["language"] == "fa" and re.search("[پچژگکی]", r["text"])]
    assert len(persian) == PER_LANGUAGE


def test_at_least_twenty_near_misses_per_language(rows: list[dict]) -> None:
    near = Counter(r["language"] for r in rows if r["topic"] in WORLD_NEAR_MISS)
    assert min(near[lang] for lang in SCRIPTS) >= 20, near
    assert sum(r["topic"] not in WORLD_NEAR_MISS for r in rows) >= 20 * len(SCRIPTS)  # everyday asks too


def test_no_repeats_and_no_text_of_another_set(rows: list[dict]) -> None:
    ours = [folded(r["text"]) for r in rows]
    assert len(set(ours)) == len(ours), "a text repeats"
    others: set[str] = set()
    for path in sorted((ROOT / "tests/data").rglob("*.jsonl")):
        if path == WORLD:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else None
            # the held-out multilingual set copies this file's held-out rows (build_guard_sets.py)
            if isinstance(row, dict) and row.get("source") != "multilingual-handwritten":
                others |= {folded(t) for t in gd.row_texts(row)}
    assert others and not set(ours) & others
