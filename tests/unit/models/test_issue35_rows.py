"""Issue 35's hand-written rows: plainly worded self-harm and hate asks and role-play recipe
requests (app/models/data/harmful_seeds.jsonl, `source: project-issue35-plain`), everyday
near-misses with violent words (app/models/data/guard_train_everyday.jsonl, `source:
project-issue35-nearmiss`), and their held-out 30% (tests/data/guard/issue35_holdout.jsonl),
which no trainer reads. No row may repeat a text of any evaluation set, so that the held-out
figures of docs/model-cards/harmful-content.md stay figures on unseen text."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import guard_data as gd  # noqa: E402
import guard_train_data as gtd  # noqa: E402

SEEDS = ROOT / "app/models/data/harmful_seeds.jsonl"
HOLDOUT = ROOT / "tests/data/guard/issue35_holdout.jsonl"
HOLDOUT_SHARE, SALT = 0.3, "issue35-holdout"  # the rule the rows were split by
HARM = {"violence_weapons", "sexual", "minors", "self_harm", "hate", "crime_hacking"}


def folded(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


@pytest.fixture(scope="module")
def train_rows() -> list[dict]:
    seeds = [r for r in gd.read_jsonl(SEEDS) if r.get("source") == "project-issue35-plain"]
    everyday = [r for r in gd.read_jsonl(gtd.EVERYDAY) if r["source"] == gtd.NEARMISS_FILE_SOURCE]
    return seeds + everyday


@pytest.fixture(scope="module")
def held() -> list[dict]:
    return gd.read_jsonl(HOLDOUT)


def test_rows_are_labelled_and_split_by_the_stated_rule(train_rows: list[dict], held: list[dict]) -> None:
    harm = [r for r in train_rows if "category" in r]
    assert len(harm) >= 70 and {r["category"] for r in harm} == HARM
    assert len(train_rows) - len(harm) >= 130
    for r in train_rows:
        assert gd.bucket(r["text"], SALT) >= HOLDOUT_SHARE, r["text"]
    assert len(held) >= 60
    for r in held:
        assert r["split"] == "heldout" and r["source"] == "project-issue35-holdout"
        assert (r["label"] == "attack") == (r["category"] in HARM)
        assert gd.bucket(r["text"], SALT) < HOLDOUT_SHARE, r["text"]
    assert {r["label"] for r in held} == {"attack", "benign"}


def test_no_row_repeats_a_text_of_any_evaluation_set(train_rows: list[dict], held: list[dict]) -> None:
    ours = [r["text"] for r in train_rows + held]
    assert len({folded(t) for t in ours}) == len(ours), "a text repeats"
    evaluation = set()
    for path in sorted((ROOT / "tests/data").rglob("*.jsonl")):
        if path == HOLDOUT:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else None
            if isinstance(row, dict):
                evaluation |= {folded(t) for t in gd.row_texts(row)}
    mine = {folded(r["text"]) for r in held}  # heldout_texts reads the held-out file too
    evaluation |= {f for t in gd.heldout_texts() if (f := folded(t)) not in mine}
    assert not [t for t in ours if folded(t) in evaluation]


def test_trainers_read_the_training_part_only_when_asked(train_rows: list[dict], held: list[dict]) -> None:
    plain = gtd.everyday_rows()
    with_nearmiss = gtd.everyday_rows(nearmiss=True)
    ours = {r["text"] for r in train_rows}
    assert not [r for r in plain if r.text in ours]
    added = [r for r in with_nearmiss if r.source == gtd.NEARMISS_SOURCE]
    assert {r.text for r in added} == {r["text"] for r in train_rows if "kind" in r}
    held_texts = {r["text"] for r in held}
    assert not [r for r in with_nearmiss if r.text in held_texts]
    # the held-out file is a held-out set: the trainers' leak check drops its texts
    keys = gd.heldout_keys()
    assert all(gd.leaks(t, keys) for t in held_texts)


def test_harmful_trainer_reads_the_seeds_only_with_nearmiss_rows(
    tmp_path: Path, train_rows: list[dict]
) -> None:
    import train_harmful as module

    mmlu = tmp_path / "mmlu.jsonl"
    mmlu.write_text(
        "".join(json.dumps({"question_id": i, "question": f"What is {i} + {i}?"}) + "\n" for i in range(6))
    )
    seeds = {r["text"]: r["category"] for r in train_rows if "category" in r}
    without = [e for e in module.load_local(mmlu, mmlu_limit=2, plain=True) if e.text in seeds]
    with_them = [e for e in module.load_local(mmlu, mmlu_limit=2, nearmiss=True) if e.text in seeds]
    assert without == []
    assert {(e.text, e.category) for e in with_them} == set(seeds.items())
    assert all(e.source == "seed-issue35" and e.weight == module.SEED_WEIGHT for e in with_them)
    assert module.parse_args([]).nearmiss_rows is False
