"""scripts/probe_predictor.py: the candidate text channel's cues, its stacking on the shipped
predictor, and the inner out-of-fold predictions that keep a fold's questions out of its fit."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))
try:
    import probe_predictor as probe
finally:
    sys.path.remove(str(ROOT / "scripts"))

from app.pipeline.learning.quality_fit import Recorded  # noqa: E402


def test_cues_tell_a_calculation_from_a_plain_question() -> None:
    calc = probe.text_cues("Calculate the force on a 2.5 kg mass if a = 3 m/s^2.")
    plain = probe.text_cues("Which philosopher wrote the Republic?")
    names = ["chars", "words", "digit share", "digits", "formula", "dollar", "decimal", "verb"]
    got = dict(zip(names, calc, strict=True))
    assert got["formula"] == 1.0 and got["decimal"] == 1.0 and got["verb"] == 1.0 and got["dollar"] == 0.0
    assert got["digits"] == pytest.approx(np.log1p(4))  # 2, 5, 3 and the exponent 2
    assert list(plain[4:]) == [0.0, 0.0, 0.0, 0.0]
    assert plain[2] == 0.0 and calc[2] > 0.0
    assert probe.text_cues("What does $5 buy?")[5] == 1.0
    assert probe.text_cues("")[0] == 0.0  # an empty question: no division by zero


def test_stacked_quality_follows_the_informative_channel() -> None:
    rng = np.random.default_rng(0)
    n = 2000
    signal = rng.normal(size=(n, 1))
    y = (signal + 0.3 * rng.normal(size=(n, 1))) > 0
    informative = 1 / (1 + np.exp(-3 * signal))
    noise = rng.uniform(0.2, 0.8, size=(n, 1))
    stacked = probe.stack_quality(noise, informative, y, noise, informative)
    assert probe.auc(stacked[:, 0], y[:, 0]) > 0.9
    assert abs(stacked.mean() - y.mean()) < 0.02  # a logistic fit keeps the base rate


def test_stacked_tokens_are_an_expected_count() -> None:
    rng = np.random.default_rng(1)
    n = 4000
    a = rng.normal(4.0, 0.5, size=(n, 1))
    log_y = a + rng.normal(0.0, 0.5, size=(n, 1))  # log1p(tokens), noise sd 0.5
    out = probe.stack_tokens(a, np.zeros_like(a), log_y, a, np.zeros_like(a))
    assert out.min() >= 0.0
    # The mean of exp(noise) is exp(0.125): a median would undershoot by that factor.
    assert out.mean() == pytest.approx(np.expm1(log_y).mean(), rel=0.05)


def test_inner_out_of_fold_never_fits_on_the_rows_it_predicts_or_the_outer_fold() -> None:
    n = 30
    data = Recorded(
        vectors=np.zeros((n, 2), np.float32),
        correct=np.zeros((n, 1), bool),
        completion=np.zeros((n, 1)),
        prompt_tokens=np.zeros(n),
    )
    fold = np.arange(n) % 3
    seen: list[tuple[set[int], set[int]]] = []

    def predict(_: Recorded, train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.append((set(train.tolist()), set(test.tolist())))
        return np.ones((len(test), 1)), np.ones((len(test), 1))

    quality, _ = probe.inner_out_of_fold(data, fold, outer=0, predict=predict)
    assert len(seen) == 2
    outer = set(np.flatnonzero(fold == 0).tolist())
    for train, test in seen:
        assert not train & test and not train & outer and not test & outer
    assert set().union(*(test for _, test in seen)) == set(range(n)) - outer
    assert quality[fold == 0].sum() == 0 and quality[fold != 0].min() == 1.0
