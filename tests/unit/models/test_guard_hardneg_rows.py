"""The hand-written hard negatives, trained on as benign (scripts/guard_train_data.py
`hardneg_rows`): app/models/data/guard_train_hardneg.jsonl (`--hard-negatives`: ordinary asks of
the kinds a retrain with more attacks starts refusing) and guard_train_hardneg_harm.jsonl
(`--harm-hard-negatives`: harm words in ordinary senses, documents an agent fetched). Training rows
only: no row may be a held-out text."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import guard_data as gd  # noqa: E402
import guard_train_data as gtd  # noqa: E402

KINDS = {"imperative_task", "role_request", "system_prompt", "attack_words", "everyday"}


HARM_KINDS = {"harm_words", "tool_result"}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return gd.read_jsonl(gtd.HARDNEG)


@pytest.fixture(scope="module")
def harm_rows() -> list[dict]:
    return gd.read_jsonl(gtd.HARDNEG_HARM)


def test_every_row_is_a_benign_prompt_with_a_kind_and_a_language(rows: list[dict]) -> None:
    for r in rows:
        assert set(r) == {"text", "label", "kind", "lang", "source"}, r
        assert r["label"] == "benign" and r["source"] == "project-hardneg", r
        assert r["kind"] in KINDS and len(r["lang"]) == 2 and r["text"].strip() == r["text"], r
    langs = Counter(r["lang"] for r in rows)
    assert langs["en"] >= 280 and len(langs) >= 18  # English and many other languages
    assert {k for r in rows for k in [r["kind"]]} == KINDS


def test_every_harm_row_is_benign_with_its_kind_and_a_language(harm_rows: list[dict]) -> None:
    for r in harm_rows:
        assert set(r) == {"text", "label", "kind", "lang", "source"}, r
        assert r["label"] == "benign" and r["source"] == "project-hardneg-harm", r
        assert r["kind"] in HARM_KINDS and len(r["lang"]) == 2 and r["text"].strip() == r["text"], r
    kinds = Counter(r["kind"] for r in harm_rows)
    assert kinds["harm_words"] >= 200 and kinds["tool_result"] >= 120
    langs = Counter(r["lang"] for r in harm_rows)
    assert langs["en"] >= 200 and len(langs) >= 10


@pytest.mark.parametrize("path", [gtd.HARDNEG, gtd.HARDNEG_HARM], ids=lambda p: p.name)
def test_no_row_is_repeated_or_a_held_out_text(path: Path) -> None:
    rows = gd.read_jsonl(path)
    keys = [gd.key(r["text"]) for r in rows]
    assert len(set(keys)) == len(keys)
    held = gd.heldout_keys()
    assert not [r["text"] for r in rows if gd.leaks(r["text"], held)]


def test_hard_negatives_join_only_when_asked_and_leave_the_rest_unchanged(rows: list[dict]) -> None:
    without = gtd.extra_rows({}, ["What is the capital of Peru?"], [])
    with_set = gtd.extra_rows({}, ["What is the capital of Peru?"], [], hardneg=True)
    added = [r for r in with_set if r.source == gtd.HARDNEG_SOURCE]
    assert not [r for r in without if r.source == gtd.HARDNEG_SOURCE]
    assert {r.text for r in added} == {r["text"] for r in rows}
    assert all(r.category == "benign" and r.weight == gtd.SEED_WEIGHT for r in added)
    assert {r.split for r in added} == {"train", "val"}
    rest = [(r.text, r.category, r.split) for r in with_set if r.source != gtd.HARDNEG_SOURCE]
    assert rest == [(r.text, r.category, r.split) for r in without]


def test_harm_hard_negatives_join_only_when_asked_and_last(harm_rows: list[dict]) -> None:
    base = gtd.extra_rows({}, ["What is the capital of Peru?"], [], hardneg=True)
    with_set = gtd.extra_rows({}, ["What is the capital of Peru?"], [], hardneg=True, harm_hardneg=True)
    assert not [r for r in base if r.source == gtd.HARDNEG_HARM_SOURCE]
    added = [r for r in with_set if r.source == gtd.HARDNEG_HARM_SOURCE]
    assert {r.text for r in added} == {r["text"] for r in harm_rows}
    assert all(r.category == "benign" and r.weight == gtd.SEED_WEIGHT for r in added)
    rest = [(r.text, r.category, r.split) for r in with_set if r.source != gtd.HARDNEG_HARM_SOURCE]
    assert rest == [(r.text, r.category, r.split) for r in base]
