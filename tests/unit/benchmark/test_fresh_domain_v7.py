"""The fresh hand-written domain chat set v7 (`dom7`, 2026-12-01, late), written for the next
domain decision while no model had read it: shape, 20 prompts a category, half of them in 16+
other languages, each language in its own script, and no text or near-copy shared with a
training or another evaluation file."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.unit.benchmark.test_fresh_domain_v6 import NEAR_COPY, NON_LATIN, SCRIPTS, jaccard, words
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

DOMAIN_V7 = ROOT / "tests/data/domain_chat_eval_v7.jsonl"
SOURCE7 = "handwritten-dom7-2026-12-01"
FIELDS = {"text", "category", "lang", "source"}


@pytest.fixture(scope="module")
def v7() -> list[dict]:
    return rows(DOMAIN_V7)


def test_domain_v7_fields_and_20_prompts_per_category(v7: list[dict]) -> None:
    categories = {r["category"] for r in rows(DOMAIN_V5)}
    assert len(v7) == 280
    assert all(set(r) == FIELDS and r["text"].strip() for r in v7)
    assert {r["source"] for r in v7} == {SOURCE7}
    assert Counter(r["category"] for r in v7) == dict.fromkeys(categories, 20)


def test_domain_v7_is_half_other_languages_in_their_scripts(v7: list[dict]) -> None:
    assert all(re.fullmatch(r"[a-z]{2}", r["lang"]) for r in v7), "ISO 639-1 codes"
    other = Counter(r["lang"] for r in v7 if r["lang"] != "en")
    assert sum(other.values()) >= 140 and len(other) >= 16 and max(other.values()) <= 20
    assert all(
        other[lang] >= 4 for lang in ("zh", "ja", "ko", "ru", "ar", "hi", "es", "de", "fr", "pt", "it", "tr")
    )
    assert min(Counter(r["category"] for r in v7 if r["lang"] != "en").values()) >= 8
    wrong = [
        (r["lang"], r["text"][:40])
        for r in v7
        if (r["lang"] in SCRIPTS and not SCRIPTS[r["lang"]].search(r["text"]))
        or (r["lang"] not in SCRIPTS and r["lang"] not in ("bn",) and NON_LATIN.search(r["text"]))
    ]
    assert not wrong


def test_domain_v7_repeats_no_text_and_shares_none(v7: list[dict]) -> None:
    texts = [folded(r["text"]) for r in v7]
    assert len(set(texts)) == len(texts)
    assert not [
        (a, b)
        for i, a in enumerate(texts)
        for b in texts[i + 1 :]
        if jaccard(words(a), words(b)) >= NEAR_COPY
    ]
    trained = [t for f in TRAINING for r in rows(f) if isinstance(r, dict) for t in texts_of(r)]
    trained += [t for f in GUARD_SETS for r in rows(f) if r.get("split") != "heldout" for t in texts_of(r)]
    others = [
        t for f in EVALUATION if f != DOMAIN_V7 for r in rows(f) if isinstance(r, dict) for t in texts_of(r)
    ]
    known = {folded(t) for t in trained + others}
    assert DOMAIN_V7 in EVALUATION
    assert not [r["text"] for r in v7 if folded(r["text"]) in known]


CHAT_PROMPTS = [
    *(p for p in sorted((ROOT / "tests/data").glob("domain_chat_eval*.jsonl")) if p != DOMAIN_V7),
    ROOT / "app/models/data/domain_chat_train.jsonl",
    ROOT / "scripts/data/domain_chat_train_more.jsonl",
]


@pytest.mark.parametrize("path", CHAT_PROMPTS, ids=lambda p: p.name)
def test_domain_v7_has_no_near_copy_of_a_chat_prompt(path: Path, v7: list[dict]) -> None:
    theirs = [words(r["text"]) for r in rows(path)]
    assert theirs
    assert not [r["text"] for r in v7 if any(jaccard(words(r["text"]), w) >= NEAR_COPY for w in theirs)]
