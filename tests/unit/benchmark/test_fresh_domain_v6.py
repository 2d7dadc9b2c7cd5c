"""The fresh hand-written domain chat set v6 (`dom6`, 2026-12-01), half of it in languages other
than English: shape, counts per category and per language, each language in its own script, and
no text shared with a training or another evaluation file, so that a score on it (for the
multilingual reader) is a score on unseen text in those languages."""

from __future__ import annotations

import re
from collections import Counter
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

DOMAIN_V6 = ROOT / "tests/data/domain_chat_eval_v6.jsonl"
SOURCE6 = "handwritten-dom6-2026-12-01"
FIELDS = {"text", "category", "lang", "source"}
# The brief's floors: half the set not in English, spread over enough languages to be read per
# language, none dominating, and the six scripts v5 had none of with enough rows each.
MIN_NON_ENGLISH = 140
MIN_LANGUAGES = 12
MAX_PER_LANGUAGE = 20
MIN_PER_CATEGORY_NON_ENGLISH = 8
MIN_PER_REQUIRED_LANGUAGE = 8
REQUIRED = ("zh", "ja", "ru", "ar", "hi", "ko")
# The script each of those languages is written in (natively, not transliterated).
SCRIPTS = {
    "zh": re.compile(r"[\u4e00-\u9fff]"),
    "ja": re.compile(r"[\u3040-\u30ff]"),  # kana: Japanese, not Chinese with the same characters
    "ko": re.compile(r"[\uac00-\ud7af]"),
    "ru": re.compile(r"[\u0400-\u04ff]"),
    "uk": re.compile(r"[іїєґІЇЄҐ]"),  # letters Russian lacks
    "ar": re.compile(r"[\u0600-\u06ff]"),
    "fa": re.compile(r"[\u0600-\u06ff]"),
    "hi": re.compile(r"[\u0900-\u097f]"),
    "el": re.compile(r"[\u0370-\u03ff]"),
    "he": re.compile(r"[\u0590-\u05ff]"),
    "th": re.compile(r"[\u0e00-\u0e7f]"),
}
NON_LATIN = re.compile(
    r"[\u0370-\u03ff\u0400-\u04ff\u0590-\u06ff\u0900-\u097f\u0e00-\u0e7f\u3040-\u9fff\uac00-\ud7af]"
)
# Near-copy guard of the brief: token Jaccard on lower-cased word sets.
NEAR_COPY = 0.6


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


@pytest.fixture(scope="module")
def v6() -> list[dict]:
    return rows(DOMAIN_V6)


def test_domain_v6_has_20_prompts_per_category_of_v5(v6: list[dict]) -> None:
    categories = {r["category"] for r in rows(DOMAIN_V5)}
    assert len(v6) == 280
    assert all(set(r) == FIELDS and r["text"].strip() for r in v6)
    assert {r["source"] for r in v6} == {SOURCE6}
    assert Counter(r["category"] for r in v6) == dict.fromkeys(categories, 20)


def test_domain_v6_language_counts(v6: list[dict]) -> None:
    assert all(re.fullmatch(r"[a-z]{2}", r["lang"]) for r in v6), "ISO 639-1 codes"
    per_language = Counter(r["lang"] for r in v6 if r["lang"] != "en")
    assert sum(per_language.values()) >= MIN_NON_ENGLISH
    assert len(per_language) >= MIN_LANGUAGES
    assert max(per_language.values()) <= MAX_PER_LANGUAGE
    assert all(per_language[lang] >= MIN_PER_REQUIRED_LANGUAGE for lang in REQUIRED)
    per_category = Counter(r["category"] for r in v6 if r["lang"] != "en")
    assert len(per_category) == 14
    assert min(per_category.values()) >= MIN_PER_CATEGORY_NON_ENGLISH


def test_domain_v6_rows_are_written_in_their_languages_script(v6: list[dict]) -> None:
    """A non-Latin language is in its own script; English and Latin-script rows have none."""
    wrong = [
        (r["lang"], r["text"][:40])
        for r in v6
        if (r["lang"] in SCRIPTS and not SCRIPTS[r["lang"]].search(r["text"]))
        or (r["lang"] not in SCRIPTS and NON_LATIN.search(r["text"]))
    ]
    assert not wrong
    assert not [r["text"][:40] for r in v6 if r["lang"] == "zh" and SCRIPTS["ja"].search(r["text"])]


def test_domain_v6_repeats_no_text(v6: list[dict]) -> None:
    texts = [folded(r["text"]) for r in v6]
    assert len(set(texts)) == len(texts)
    pairs = [
        (a, b)
        for i, a in enumerate(texts)
        for b in texts[i + 1 :]
        if jaccard(words(a), words(b)) >= NEAR_COPY
    ]
    assert not pairs


def test_domain_v6_shares_no_text_with_training_files(v6: list[dict]) -> None:
    assert TRAINING, "no training files found"
    trained = [t for f in TRAINING for r in rows(f) if isinstance(r, dict) for t in texts_of(r)]
    trained += [t for f in GUARD_SETS for r in rows(f) if r.get("split") != "heldout" for t in texts_of(r)]
    exact, loose = set(trained), {folded(t) for t in trained}
    assert not [r["text"] for r in v6 if r["text"] in exact or folded(r["text"]) in loose]


def test_domain_v6_shares_no_text_with_other_evaluation_files(v6: list[dict]) -> None:
    assert DOMAIN_V6 in EVALUATION and len(EVALUATION) > 10
    others = {
        folded(t)
        for f in EVALUATION
        if f != DOMAIN_V6
        for r in rows(f)
        if isinstance(r, dict)
        for t in texts_of(r)
    }
    assert not [r["text"] for r in v6 if folded(r["text"]) in others]


# Every other chat set, and the chat prompts the domain head trains on.
CHAT_PROMPTS = [
    *(p for p in sorted((ROOT / "tests/data").glob("domain_chat_eval*.jsonl")) if p != DOMAIN_V6),
    ROOT / "app/models/data/domain_chat_train.jsonl",
    ROOT / "scripts/data/domain_chat_train_more.jsonl",
]


@pytest.mark.parametrize("path", CHAT_PROMPTS, ids=lambda p: p.name)
def test_domain_v6_has_no_near_copy_of_a_chat_prompt(path: Path, v6: list[dict]) -> None:
    theirs = [words(r["text"]) for r in rows(path)]
    assert theirs
    near = [r["text"] for r in v6 if any(jaccard(words(r["text"]), w) >= NEAR_COPY for w in theirs)]
    assert not near
