"""scripts/train_jailbreak.py's choices that decide a candidate (no training run): the labels of
the retired fresh sets' rows and the cut matched to another head's flag rate."""

from __future__ import annotations

import numpy as np

from tests.unit.benchmark.script_loader import load_script as _script


def test_the_jailbreak_trainer_labels_retired_rows_as_its_shared_rows() -> None:
    """`--retired`: jailbreaks, injections and framed harm asks are attacks, ordinary prompts
    benign, plain harm asks the harmful head's (left out); the rows survive the leak filter."""
    tj, gtd = _script("train_jailbreak"), _script("guard_train_data")
    assert tj.parse_args([]).retired is False and tj.parse_args(["--retired"]).retired
    row = gtd.Row
    assert tj.guard_label(row("x", "benign", "s", "train")) == 0
    assert tj.guard_label(row("x", "prompt_injection", "s", "train")) == 1
    assert tj.guard_label(row("x", "hate", "s", "train", framed=True)) == 1
    assert tj.guard_label(row("x", "hate", "s", "train")) is None
    examples = [tj.Example(r.text, 0, r.source, r.split) for r in gtd.retired_rows()[:50]]
    assert len(tj.drop_leaks(examples, retired=True)) == 50 and not tj.drop_leaks(examples)


def test_a_cut_matched_to_another_heads_flag_rate_flags_no_more_benign_rows() -> None:
    """`--match-fpr-of`: the lowest cut at which the benign validation rows are flagged no more
    often than the reference head flagged them (ties at the cut stay unflagged)."""
    tj = _script("train_jailbreak")
    z = np.array([5.0, 4.0, 3.0, 3.0, 2.0, 1.0, 0.5, -1.0, 6.0, 2.5])
    y = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1])
    for rate, flagged in ((0.0, 0), (0.125, 1), (0.25, 2), (0.3, 2), (0.5, 4)):
        cut = tj.calibrate_offset(z, y, ["s"] * len(z), match_fpr=rate)
        assert int((z[y == 0] >= cut).sum()) == flagged <= rate * 8
