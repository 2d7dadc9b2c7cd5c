"""The hand-written everyday negatives (app/models/data/guard_train_everyday.jsonl): ordinary
prompts whose words sound like harm or an attack, trained on as benign by both guards with
`--everyday-train` (scripts/guard_train_data.py `everyday_rows`). The set is training-only: no
row may be a held-out text (docs/security.md, "Evaluation sets")."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))

import guard_data as gd  # noqa: E402
import guard_train_data as gtd  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return gd.read_jsonl(gtd.EVERYDAY)


def test_every_row_is_a_benign_single_prompt_with_a_kind(rows: list[dict]) -> None:
    assert len(rows) >= 350
    for r in rows:
        assert r["label"] == "benign" and r["source"] in (gtd.EVERYDAY_SOURCE, gtd.NEARMISS_FILE_SOURCE), r
        assert isinstance(r["kind"], str) and r["kind"], r
        assert 5 <= len(r["text"].split()) <= 80, r["text"]
    assert len({r["kind"] for r in rows}) >= 15  # spread over many kinds, not one topic


def test_no_row_is_repeated_or_a_held_out_text(rows: list[dict]) -> None:
    keys = [gd.key(r["text"]) for r in rows]
    assert len(set(keys)) == len(keys)
    held = gd.heldout_keys()
    assert not [r["text"] for r in rows if gd.leaks(r["text"], held)]


def test_extra_rows_add_the_set_only_when_asked_and_leave_the_rest_unchanged(rows: list[dict]) -> None:
    without = gtd.extra_rows({}, ["What is the capital of Peru?"], [])
    with_set = gtd.extra_rows({}, ["What is the capital of Peru?"], [], everyday=True)
    assert not [r for r in without if r.source == "everyday-train"]
    added = [r for r in with_set if r.source == "everyday-train"]
    assert {r.text for r in added} == {r["text"] for r in rows if r["source"] == gtd.EVERYDAY_SOURCE}
    assert all(r.category == "benign" and r.weight == gtd.SEED_WEIGHT for r in added)
    assert {r.split for r in added} == {"train", "val"}  # split like the seeds: some rows tune thresholds
    rest = [(r.text, r.category, r.split) for r in with_set if r.source != "everyday-train"]
    assert rest == [(r.text, r.category, r.split) for r in without]  # the framed rows do not move


def test_threshold_rules_cap_the_validation_flag_rates() -> None:
    spec = importlib.util.spec_from_file_location("train_harmful", ROOT / "scripts" / "train_harmful.py")
    assert spec is not None and spec.loader is not None
    th = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_harmful", th)
    spec.loader.exec_module(th)
    rng = np.random.default_rng(0)
    n_mmlu, n_other, n_harm = 1000, 200, 200
    z = rng.normal(0, 1.5, (n_mmlu + n_other + n_harm, 7))
    z[n_mmlu + n_other :, 1] += 4.0  # harm rows lean to a harm category
    y = np.r_[np.zeros(n_mmlu + n_other, int), np.ones(n_harm, int)]
    sources = np.array(["mmlu"] * n_mmlu + ["everyday-train"] * n_other + ["pyrit"] * n_harm)

    def flagged(offset: float, mask: np.ndarray) -> float:
        zz = z.copy()
        zz[:, 0] += offset
        p = np.exp(zz - zz.max(axis=1, keepdims=True))
        return float((p[:, 0] / p.sum(axis=1) < 0.5)[mask].mean())

    card, strict = th.calibrate(z, y, sources, "card"), th.calibrate(z, y, sources, "strict")
    assert card < strict  # the card's caps are looser: a lower benign offset
    mmlu, everyday = sources == "mmlu", sources == "everyday-train"
    assert flagged(card, mmlu) <= 0.01 and flagged(card, everyday) <= 0.02
    assert flagged(strict, mmlu) <= 0.003 and flagged(strict, everyday) <= 0.01
