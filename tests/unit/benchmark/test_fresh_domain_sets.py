"""The fresh hand-written domain chat sets written half in languages other than English: v6
(`dom6`, 2026-12-01; read once, on the multilingual head's decision) and v7 (`dom7`, 2026-12-01,
late; unread, for the next decision). Shape, counts per category and per language, each language
in its own script, and no text or near-copy shared with a training or another evaluation file,
so that a score on a set (for the multilingual reader) is a score on unseen text in those languages."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from tests.unit.benchmark.test_fresh_eval_sets import (
    DOMAIN_V5,
    EVALUATION,
    GUARD_SETS,
    ROOT,
    TRAINING,
    folded,
    rows,
    texts_of,
)


@dataclass(frozen=True)
class ChatSet:
    """A set and its brief's floors: half the set not in English, spread over enough languages to
    be read per language, none dominating, and the required languages with enough rows each."""

    path: Path
    source: str
    min_languages: int
    required: tuple[str, ...]
    min_per_required: int


DOMAIN_V6 = ChatSet(
    ROOT / "tests/data/domain_chat_eval_v6.jsonl",
    "handwritten-dom6-2026-12-01",
    min_languages=12,
    required=("zh", "ja", "ru", "ar", "hi", "ko"),  # the six scripts v5 had none of
    min_per_required=8,
)
DOMAIN_V7 = ChatSet(
    ROOT / "tests/data/domain_chat_eval_v7.jsonl",
    "handwritten-dom7-2026-12-01",
    min_languages=16,
    required=("zh", "ja", "ko", "ru", "ar", "hi", "es", "de", "fr", "pt", "it", "tr"),
    min_per_required=4,
)
SETS = (DOMAIN_V6, DOMAIN_V7)
FIELDS = {"text", "category", "lang", "source"}
MIN_NON_ENGLISH = 140
MAX_PER_LANGUAGE = 20
MIN_PER_CATEGORY_NON_ENGLISH = 8
# The script each language is written in (natively, not transliterated).
SCRIPTS = {
    "zh": re.compile(r"[\u4e00-\u9fff]"),
    "ja": re.compile(r"[\u3040-\u30ff]"),  # kana: Japanese, not Chinese with the same characters
    "ko": re.compile(r"[\uac00-\ud7af]"),
    "ru": re.compile(r"[\u0400-\u04ff]"),
    "uk": re.compile(r"[іїєґІЇЄҐ]"),  # letters Russian lacks
    "ar": re.compile(r"[\u0600-\u06ff]"),
    "fa": re.compile(r"[\u0600-\u06ff]"),
    "hi": re.compile(r"[\u0900-\u097f]"),
    "bn": re.compile(r"[\u0980-\u09ff]"),
    "el": re.compile(r"[\u0370-\u03ff]"),
    "he": re.compile(r"[\u0590-\u05ff]"),
    "th": re.compile(r"[\u0e00-\u0e7f]"),
}
NON_LATIN = re.compile(
    r"[\u0370-\u03ff\u0400-\u04ff\u0590-\u06ff\u0900-\u09ff\u0e00-\u0e7f\u3040-\u9fff\uac00-\ud7af]"
)
# Near-copy guard of the brief: token Jaccard on lower-cased word sets.
NEAR_COPY = 0.6


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


@cache
def prompts_of(path: Path) -> list[dict]:
    """A set's rows, read once for the module."""
    return rows(path)


each_set = pytest.mark.parametrize("spec", SETS, ids=lambda s: s.path.stem)


@each_set
def test_20_prompts_per_category_of_v5(spec: ChatSet) -> None:
    prompts = prompts_of(spec.path)
    categories = {r["category"] for r in rows(DOMAIN_V5)}
    assert len(prompts) == 280
    assert all(set(r) == FIELDS and r["text"].strip() for r in prompts)
    assert {r["source"] for r in prompts} == {spec.source}
    assert Counter(r["category"] for r in prompts) == dict.fromkeys(categories, 20)


@each_set
def test_language_counts(spec: ChatSet) -> None:
    prompts = prompts_of(spec.path)
    assert all(re.fullmatch(r"[a-z]{2}", r["lang"]) for r in prompts), "ISO 639-1 codes"
    per_language = Counter(r["lang"] for r in prompts if r["lang"] != "en")
    assert sum(per_language.values()) >= MIN_NON_ENGLISH
    assert len(per_language) >= spec.min_languages
    assert max(per_language.values()) <= MAX_PER_LANGUAGE
    assert all(per_language[lang] >= spec.min_per_required for lang in spec.required)
    per_category = Counter(r["category"] for r in prompts if r["lang"] != "en")
    assert len(per_category) == 14
    assert min(per_category.values()) >= MIN_PER_CATEGORY_NON_ENGLISH


@each_set
def test_rows_are_written_in_their_languages_script(spec: ChatSet) -> None:
    """A non-Latin language is in its own script; English and Latin-script rows have none."""
    prompts = prompts_of(spec.path)
    wrong = [
        (r["lang"], r["text"][:40])
        for r in prompts
        if (r["lang"] in SCRIPTS and not SCRIPTS[r["lang"]].search(r["text"]))
        or (r["lang"] not in SCRIPTS and NON_LATIN.search(r["text"]))
    ]
    assert not wrong
    assert not [r["text"][:40] for r in prompts if r["lang"] == "zh" and SCRIPTS["ja"].search(r["text"])]


@each_set
def test_repeats_no_text(spec: ChatSet) -> None:
    texts = [folded(r["text"]) for r in prompts_of(spec.path)]
    assert len(set(texts)) == len(texts)
    pairs = [
        (a, b)
        for i, a in enumerate(texts)
        for b in texts[i + 1 :]
        if jaccard(words(a), words(b)) >= NEAR_COPY
    ]
    assert not pairs


@each_set
def test_shares_no_text_with_training_files(spec: ChatSet) -> None:
    assert TRAINING, "no training files found"
    trained = [t for f in TRAINING for r in rows(f) if isinstance(r, dict) for t in texts_of(r)]
    trained += [t for f in GUARD_SETS for r in rows(f) if r.get("split") != "heldout" for t in texts_of(r)]
    exact, loose = set(trained), {folded(t) for t in trained}
    assert not [r["text"] for r in prompts_of(spec.path) if r["text"] in exact or folded(r["text"]) in loose]


@each_set
def test_shares_no_text_with_other_evaluation_files(spec: ChatSet) -> None:
    prompts = prompts_of(spec.path)
    assert spec.path in EVALUATION and len(EVALUATION) > 10
    others = {
        folded(t)
        for f in EVALUATION
        if f != spec.path
        for r in rows(f)
        if isinstance(r, dict)
        for t in texts_of(r)
    }
    assert not [r["text"] for r in prompts if folded(r["text"]) in others]


# Every chat set, and the chat prompts the domain head trains on.
CHAT_PROMPTS = [
    *sorted((ROOT / "tests/data").glob("domain_chat_eval*.jsonl")),
    ROOT / "app/models/data/domain_chat_train.jsonl",
    ROOT / "scripts/data/domain_chat_train_more.jsonl",
]


@pytest.mark.parametrize(
    ("spec", "path"),
    [(spec, path) for spec in SETS for path in CHAT_PROMPTS if path != spec.path],
    ids=lambda x: x.path.stem if isinstance(x, ChatSet) else x.name,
)
def test_no_near_copy_of_a_chat_prompt(spec: ChatSet, path: Path) -> None:
    theirs = [words(r["text"]) for r in rows(path)]
    assert theirs
    near = [
        r["text"]
        for r in prompts_of(spec.path)
        if any(jaccard(words(r["text"]), w) >= NEAR_COPY for w in theirs)
    ]
    assert not near
