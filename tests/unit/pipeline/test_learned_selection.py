"""Learned, cost-aware model selection (`algorithm.type: knn | mlp | automix`) on small fixtures."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.config.document import RouterConfig
from app.config.selection import Algorithm, AutomixSettings
from app.models.selection import (
    KnnQuality,
    MlpQuality,
    SelectionArtifactError,
    load_quality_model,
    packaged_artifact,
    save_knn,
    save_mlp,
)
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.selectors import ModelOption, automix_order, by_value

DIM = 4
MODELS = ("big", "small")


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def two_topics_knn(k: int = 3) -> KnnQuality:
    """Topic A (first axis): only `big` is right. Topic B (second axis): both are right."""
    points = np.stack([unit(1, 0.1 * i, 0, 0) for i in range(3)] + [unit(0.1 * i, 1, 0, 0) for i in range(3)])
    outcomes = np.array([[1, 0]] * 3 + [[1, 1]] * 3, dtype=bool)
    return KnnQuality(
        models=MODELS,
        mean_completion_tokens=np.array([100.0, 100.0]),
        mean=np.zeros(DIM, dtype=np.float32),
        projection=np.eye(DIM, dtype=np.float32),  # the identity: neighbours by the raw vector
        points=np.round(points * 127).astype(np.int8),
        outcomes=outcomes,
        prior=outcomes.mean(axis=0),
        k=k,
        prior_weight=0.0,
    )


def test_knn_quality_is_the_neighbours_record() -> None:
    knn = two_topics_knn()
    np.testing.assert_allclose(knn.predict(unit(1, 0.05, 0, 0)), [1.0, 0.0], atol=1e-3)
    np.testing.assert_allclose(knn.predict(unit(0.05, 1, 0, 0)), [1.0, 1.0], atol=1e-3)


def test_knn_shrinks_toward_each_models_overall_accuracy() -> None:
    knn = dataclasses.replace(two_topics_knn(), prior_weight=3.0)
    # 3 neighbours of topic A (small: 0 of 3) plus 3 pseudo-votes at small's prior 0.5.
    assert knn.predict(unit(1, 0.05, 0, 0))[1] == pytest.approx((0 * 3 + 0.5 * 3) / 6, abs=1e-3)


def test_mlp_quality_is_a_sigmoid_per_model(tmp_path: Path) -> None:
    mlp = MlpQuality(
        models=MODELS,
        mean_completion_tokens=np.array([10.0, 10.0]),
        hidden_weights=np.eye(DIM, 2, dtype=np.float32),
        hidden_bias=np.zeros(2, dtype=np.float32),
        output_weights=np.array([[2.0, 0.0], [0.0, -2.0]], dtype=np.float32),
        output_bias=np.zeros(2, dtype=np.float32),
    )
    # hidden = relu([1, 0]) -> logits [2, 0] -> sigmoid [0.881, 0.5]
    np.testing.assert_allclose(mlp.predict(np.array([1, 0, 0, 0])), [1 / (1 + np.exp(-2)), 0.5], atol=1e-6)
    save_mlp(tmp_path / "mlp_model.npz", mlp)
    loaded = load_quality_model(tmp_path / "mlp_model.npz", "mlp")
    np.testing.assert_allclose(loaded.predict(np.array([1, 0, 0, 0])), mlp.predict(np.array([1, 0, 0, 0])))


def test_artifacts_round_trip_and_refuse_the_wrong_kind(tmp_path: Path) -> None:
    knn = two_topics_knn()
    save_knn(tmp_path / "knn_model.npz", knn, {"note": "fixture"})
    loaded = load_quality_model(tmp_path / "knn_model.npz", "knn")
    assert loaded.models == MODELS
    np.testing.assert_allclose(loaded.predict(unit(1, 0, 0, 0)), knn.predict(unit(1, 0, 0, 0)))
    with pytest.raises(SelectionArtifactError, match="not 'mlp'"):
        load_quality_model(tmp_path / "knn_model.npz", "mlp")
    with pytest.raises(SelectionArtifactError, match="not found"):
        load_quality_model(tmp_path / "absent.npz", "knn")
    (tmp_path / "junk.npz").write_bytes(b"not an archive")
    with pytest.raises(SelectionArtifactError):
        load_quality_model(tmp_path / "junk.npz", "knn")
    assert not list(tmp_path.glob("*.partial"))


def test_the_value_trades_predicted_quality_against_the_share_of_the_dearest_cost() -> None:
    big, small = ModelOption(_ref("big"), 0.9, 10.0), ModelOption(_ref("small"), 0.7, 1.0)
    assert [c.ref.model for c in by_value([big, small], 0.0)] == ["big", "small"]
    # t = 0.2: big 0.8*0.9 - 0.2*1.0 = 0.52; small 0.8*0.7 - 0.2*0.1 = 0.54
    assert [c.ref.model for c in by_value([big, small], 0.2)] == ["small", "big"]


def test_automix_takes_the_cheapest_model_that_passes_verification_then_escalates() -> None:
    tiny, mid, large = (
        ModelOption(_ref("tiny"), 0.5, 1.0),
        ModelOption(_ref("mid"), 0.75, 3.0),
        ModelOption(_ref("large"), 0.9, 9.0),
    )
    algorithm = Algorithm(
        type="automix", automix=AutomixSettings(verification_threshold=0.7, max_escalations=1)
    )
    assert [c.ref.model for c in automix_order([large, tiny, mid], algorithm)] == ["mid", "large", "tiny"]
    strict = Algorithm(
        type="automix", automix=AutomixSettings(verification_threshold=0.95, cost_quality_tradeoff=0.0)
    )
    assert [c.ref.model for c in automix_order([tiny, mid, large], strict)][
        0
    ] == "large"  # none passes: by value
    quality_only = Algorithm(type="automix", automix=AutomixSettings(cost_aware_routing=False))
    assert [c.ref.model for c in automix_order([tiny, mid, large], quality_only)] == ["large", "mid", "tiny"]


def test_an_ml_block_must_configure_the_family_type_names() -> None:
    with pytest.raises(ValueError, match="configures 'mlp'"):
        Algorithm.model_validate({"type": "knn", "ml": {"mlp": {}}})
    assert Algorithm.model_validate({"type": "knn"}).ml is None
    with pytest.raises(ValueError):  # a type svc-sr does not build: refused, never a silent static order
        Algorithm.model_validate({"type": "router_dc"})


# -- through the pipeline ---------------------------------------------------------------------
TOPIC_VECTORS = {"topic a": unit(1, 0.05, 0, 0), "topic b": unit(0.05, 1, 0, 0)}


async def fake_embed(texts: list[str]) -> np.ndarray:
    return np.stack([next(v for k, v in TOPIC_VECTORS.items() if k in t) for t in texts])


def config(algorithm: dict[str, Any]) -> RouterConfig:
    priced = lambda name, p: {  # noqa: E731
        "name": name,
        "pricing": {"prompt_per_1m": p, "completion_per_1m": p},
        "backend_refs": [{"endpoint": "127.0.0.1:9"}],
    }
    return RouterConfig.model_validate(
        {
            "version": "v0.3",
            "providers": {
                "defaults": {"default_model": "small"},
                "models": [priced("big", 10.0), priced("small", 1.0)],
            },
            "routing": {
                "decisions": [
                    {
                        "name": "all",
                        "modelRefs": [{"model": "big"}, {"model": "small"}],
                        "algorithm": algorithm,
                    }
                ]
            },
        }
    )


@pytest.mark.parametrize(
    ("text", "model"), [("a question on topic a", "big"), ("a question on topic b", "small")]
)
async def test_knn_in_the_pipeline_pays_for_the_big_model_only_where_the_small_one_fails(
    tmp_path: Path, text: str, model: str
) -> None:
    save_knn(tmp_path / "knn_model.npz", two_topics_knn())
    algorithm = {
        "type": "knn",
        "cost_quality_tradeoff": 0.2,
        "ml": {"knn": {"pretrained_path": str(tmp_path / "knn_model.npz"), "k": 3}},
    }
    pipeline = RouterPipeline(config(algorithm), PipelineServices(embed=fake_embed))
    plan = await pipeline.route({"model": "MoM", "messages": [{"role": "user", "content": text}]})
    assert plan.selected_model == model
    assert [t.model for t in plan.candidates] == [model, "small" if model == "big" else "big"]


def test_a_config_naming_a_missing_artifact_is_refused_when_compiled(tmp_path: Path) -> None:
    algorithm = {"type": "mlp", "ml": {"mlp": {"pretrained_path": str(tmp_path / "absent.npz")}}}
    with pytest.raises(SelectionArtifactError, match="not found"):
        RouterPipeline(config(algorithm), PipelineServices(embed=fake_embed))


def test_the_packaged_selectors_know_the_ten_recorded_models() -> None:
    for kind in ("knn", "mlp"):
        model = load_quality_model(packaged_artifact(kind), kind)
        assert len(model.models) == 10 and "gemini-1.5-pro-002" in model.models
        quality = model.predict(np.ones(384, dtype=np.float32) / np.sqrt(384))
        assert quality.shape == (10,) and np.all((quality >= 0) & (quality <= 1))


def _ref(name: str) -> Any:
    from app.config.routing import ModelRef

    return ModelRef(model=name)
