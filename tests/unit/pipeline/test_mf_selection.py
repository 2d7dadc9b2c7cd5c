"""The `mf` quality predictor (app/models/quality_mf.py), its trainer and `add_model`
(app/pipeline/learning/quality_fit.py), and the money knob `budget_per_1k`
(app/pipeline/selectors.py `budget_price`) on small synthetic data."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from app.config.pricing import Pricing
from app.config.routing import Decision
from app.config.selection import Algorithm
from app.models.quality_mf import FactorQuality, Reference
from app.models.selection import load_quality_model, save_mf
from app.pipeline.learning.quality_fit import FitSettings, Recorded, add_model, fit_mf
from app.pipeline.selectors import LearnedSelector, RefInputs, budget_price

MODELS = ("strong", "only_a", "only_b")
FAST = FitSettings(hidden=32, rank=8, epochs=15, learning_rate=5e-3, knn_ks=(5, 15), validation_share=0.3)


def topics(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n unit vectors near one of two directions (topic A or B) and which one."""
    rng = np.random.default_rng(seed + 1000)  # not the trainer's stream (its split draws from seed 0)
    topic_b = rng.random(n) < 0.5
    centres = np.random.default_rng(99).normal(0, 1, (2, 384))  # the same two topics in every call
    vectors = centres[topic_b.astype(int)] + rng.normal(0, 0.5, (n, 384))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32), topic_b


def recorded(n: int, seed: int) -> tuple[Recorded, np.ndarray]:
    """strong: right 90 % everywhere, 400 tokens; only_a: 90 % on A, 10 % on B; only_b: the
    reverse; both 100 tokens on A and 300 on B."""
    vectors, topic_b = topics(n, seed)
    rng = np.random.default_rng(seed + 1)
    chance = np.column_stack([np.full(n, 0.9), np.where(topic_b, 0.1, 0.9), np.where(topic_b, 0.9, 0.1)])
    correct = rng.random((n, 3)) < chance
    cheap_tokens = np.where(topic_b, 300.0, 100.0)
    completion = np.column_stack([np.full(n, 400.0), cheap_tokens, cheap_tokens])
    return Recorded(vectors, correct, completion, np.full(n, 50.0)), topic_b


@pytest.fixture(scope="module")
def trained() -> FactorQuality:
    data, _ = recorded(1000, seed=0)
    return fit_mf(data, MODELS, FAST)


def test_mf_learns_who_is_right_where_and_how_long_they_answer(trained: FactorQuality, tmp_path: Path):
    vectors, topic_b = topics(200, seed=7)
    quality, tokens = trained.estimate_many(vectors)
    assert quality[~topic_b, 1].mean() > 0.75 and quality[topic_b, 1].mean() < 0.25
    assert quality[topic_b, 2].mean() > 0.75 and quality[~topic_b, 2].mean() < 0.25
    assert 0.8 < quality[:, 0].mean() < 0.97
    assert tokens[topic_b, 1].mean() > 1.8 * tokens[~topic_b, 1].mean()  # 300 against 100
    assert abs(tokens[:, 1].mean() - 200) < 40 and abs(tokens[:, 0].mean() - 400) < 40
    save_mf(tmp_path / "mf_model.npz", trained)
    loaded = load_quality_model(tmp_path / "mf_model.npz", "mf")
    again, again_tokens = loaded.estimate(vectors[0])
    np.testing.assert_allclose(again, quality[0], atol=2e-3)  # float16 trunk weights
    np.testing.assert_allclose(again_tokens, tokens[0], rtol=1e-2)


def test_mf_is_calibrated_on_questions_it_never_saw(trained: FactorQuality):
    fresh, _ = recorded(1000, seed=11)
    quality, _ = trained.estimate_many(fresh.vectors)
    np.testing.assert_allclose(quality.mean(axis=0), fresh.correct.mean(axis=0), atol=0.03)
    for col in (1, 2):  # predicted and observed rates agree within each predicted band
        for low, high in ((0.0, 0.3), (0.7, 1.0)):
            band = (quality[:, col] >= low) & (quality[:, col] < high)
            assert band.sum() >= 300
            assert abs(quality[band, col].mean() - fresh.correct[band, col].mean()) < 0.06
    brier = float(((quality - fresh.correct) ** 2).mean())
    assert brier < 0.11  # the noise floor is 0.09 (right 90 % or 10 %)


def test_a_new_model_from_a_few_hundred_answers_leaves_the_others_untouched(trained: FactorQuality):
    data, topic_b = recorded(300, seed=3)
    rng = np.random.default_rng(5)
    newcomer = rng.random(300) < np.where(topic_b, 0.85, 0.2)  # good at B only
    extended = add_model(
        trained,
        "newcomer",
        Recorded(data.vectors, newcomer[:, None], np.full((300, 1), 80.0), data.prompt_tokens),
    )
    assert extended.models == (*MODELS, "newcomer")
    vectors, fresh_b = topics(200, seed=9)
    before, _ = trained.estimate_many(vectors)
    after, tokens = extended.estimate_many(vectors)
    np.testing.assert_array_equal(after[:, :3], before)
    assert after[fresh_b, 3].mean() > 0.7 and after[~fresh_b, 3].mean() < 0.35
    assert abs(tokens[:, 3].mean() - 80) < 5
    assert extended.reference is not None and extended.reference.quality.shape[1] == 4
    with pytest.raises(ValueError, match="already one of"):
        add_model(extended, "newcomer", data)


def priced(prompt: float, completion: float, column: int | None) -> RefInputs:
    pricing = Pricing(prompt_per_1m=prompt, completion_per_1m=completion)
    return RefInputs(column=column, card_quality=0.8, completion_tokens=100.0, pricing=pricing)


def hand_reference() -> FactorQuality:
    """Two reference questions, two models: dear (right 0.9, 0.8; 1000 tokens at $10/1M =
    $0.01) and cheap (0.5, 0.79; 1000 tokens at $1/1M = $0.001); no prompt cost."""
    reference = Reference(
        quality=np.array([[0.9, 0.5], [0.8, 0.79]]),
        completion_tokens=np.full((2, 2), 1000.0),
        prompt_tokens=np.zeros(2),
        embedding=np.zeros((2, 1)),
    )
    placeholder = object.__new__(FactorQuality)
    object.__setattr__(placeholder, "reference", reference)
    return placeholder


def test_the_budget_is_spent_on_the_questions_where_quality_is_cheapest():
    inputs = [priced(0, 10.0, 0), priced(0, 1.0, 1)]
    model = hand_reference()
    # Everything on dear costs 0.01 a request: a budget of 10 per 1,000 buys quality alone.
    assert budget_price(model, inputs, 0.010) == 0.0
    # 0.0055 a request: dear on question 1 only (0.4 better for 0.009 more: 44 per $), not
    # on question 2 (0.01 better: 1.1 per $): the price lies between those two rates.
    price = budget_price(model, inputs, 0.0055)
    assert 0.01 / 0.009 <= price <= 0.4 / 0.009
    # Below the cheapest choices (0.001): the cheapest it is.
    assert budget_price(model, inputs, 0.0005) == float("inf")


def test_a_decision_with_a_budget_orders_by_quality_minus_price_times_cost(
    trained: FactorQuality, tmp_path: Path
):
    from app.config.providers import ProviderModel

    save_mf(tmp_path / "mf.npz", trained)
    models = {
        "strong": ProviderModel(name="strong", pricing=Pricing(prompt_per_1m=1, completion_per_1m=10)),
        "only_a": ProviderModel(name="only_a", pricing=Pricing(prompt_per_1m=0.1, completion_per_1m=0.1)),
        "only_b": ProviderModel(name="only_b", pricing=Pricing(prompt_per_1m=0.1, completion_per_1m=0.1)),
    }

    def selector(budget: float) -> LearnedSelector:
        decision = Decision.model_validate({
            "name": "d", "modelRefs": [{"model": m} for m in MODELS],
            "algorithm": {"type": "mf", "budget_per_1k": budget, "ml": {"mf": {"pretrained_path": str(tmp_path / "mf.npz")}}},
        })  # fmt: skip
        return LearnedSelector(decision, models, trained, {})  # type: ignore[arg-type]

    vectors, topic_b = topics(2, seed=4)

    async def first(s: LearnedSelector, vector: np.ndarray) -> str:
        async def get() -> np.ndarray:
            return vector

        return (await s.order(get, 50))[0].model

    rich, poor = selector(100.0), selector(0.01)
    assert rich.price == 0.0 and poor.price > 0
    for vector, is_b in zip(vectors, topic_b, strict=True):
        assert asyncio.run(first(rich, vector)) == "strong"
        assert asyncio.run(first(poor, vector)) == ("only_b" if is_b else "only_a")


def test_budget_per_1k_takes_the_mf_type_only():
    with pytest.raises(ValidationError, match="budget_per_1k needs algorithm.type 'mf'"):
        Algorithm(type="knn", budget_per_1k=1.0)
    assert Algorithm(type="mf", budget_per_1k=0.5).budget_per_1k == 0.5
