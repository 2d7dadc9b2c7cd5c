"""The benchmark runner (app/benchmark/runner.py) on the hand-made mini dataset: questions go
through the real pipeline, the chosen model's recorded answer is scored, the cost comes from
the config's pricing and the token rule. Every expected figure is computed by hand here.

Token rule on the mini dataset: prompt tokens round(len(question) / 4 + 60) = 69, 72, 82, 76,
72, 77 for questions 1..6; completion tokens output_chars / 4 (tests/fakes/benchmark_mini).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.benchmark.dataset import Dataset
from app.benchmark.local_services import RunFeeds, VectorTable, learned_families
from app.benchmark.report import decision_mix, model_mix
from app.benchmark.runner import run_benchmark
from app.config.document import RouterConfig
from app.config.loader import parse_config

MINI = Path(__file__).resolve().parents[2] / "fakes" / "benchmark_mini"
PRICES = {"big": (2.0, 4.0), "mid": (0.5, 0.5), "small": (0.1, 0.1)}


def model(name: str, provider_model_id: str | None = None) -> dict[str, Any]:
    prompt, completion = PRICES.get(provider_model_id or name, (1.0, 1.0))
    entry: dict[str, Any] = {
        "name": name,
        "backend_refs": [{"base_url": "http://127.0.0.1:9/v1"}],
        "pricing": {"prompt_per_1m": prompt, "completion_per_1m": completion},
    }
    if provider_model_id:
        entry["provider_model_id"] = provider_model_id
    return entry


def document(
    default: str = "mid", routing: dict[str, Any] | None = None, models: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": default},
            "models": models or [model("big"), model("mid"), model("small")],
        },
        "routing": routing or {},
    }


MATH_TO_BIG: dict[str, Any] = {
    "signals": {"keywords": [{"name": "math", "keywords": ["divided", "derivative"]}]},
    "decisions": [
        {
            "name": "math",
            "priority": 10,
            "rules": {"type": "keyword", "name": "math"},
            "modelRefs": [{"model": "big"}],
        }
    ],
}


def config(**kwargs: Any) -> RouterConfig:
    return parse_config(document(**kwargs)).config


def run(cfg: RouterConfig | Path, ids: list[int] | None = None, **kwargs: Any):
    return asyncio.run(run_benchmark(cfg, Dataset.load(MINI), ids, **kwargs))


def test_default_model_alone():
    results, summary = run(config(default="mid"), batch_size=4)
    # mid is right on 1, 3, 4, 5; tokens 448 prompt + (200+400+600+400+200+300)/4 = 525 completion
    assert [r.correct for r in results] == [True, False, True, True, True, False]
    assert summary.accuracy == pytest.approx(4 / 6)
    assert summary.cost == pytest.approx((448 + 525) * 0.5 / 1e6)
    assert (summary.questions, summary.scored) == (6, 6)
    assert summary.cost_per_1k == pytest.approx(summary.cost / 6 * 1000)
    assert summary.cost_per_correct == pytest.approx(summary.cost / 4)
    assert {r.decision for r in results} == {None} and {r.dataset_model for r in results} == {"mid"}
    assert decision_mix(results) == {"(default)": 6} and model_mix(results) == {"mid": 6}


def test_keyword_decision_sends_math_to_big_and_the_rest_to_small():
    results, summary = run(config(default="small", routing=MATH_TO_BIG))
    assert [(r.question_id, r.decision, r.model) for r in results] == [
        (1, "math", "big"),
        (2, "math", "big"),
        (3, None, "small"),
        (4, None, "small"),
        (5, None, "small"),
        (6, None, "small"),
    ]
    # big: right on 1 and 2; small: right on 3, 5, 6, wrong on 4
    assert summary.accuracy == pytest.approx(5 / 6)
    big = (69 * 2 + 100 * 4) + (72 * 2 + 200 * 4)  # 538 + 944 (per 1M tokens)
    small = ((82 + 75) + (76 + 100) + (72 + 50) + (77 + 25)) * 0.1  # 557 tokens at 0.1
    assert summary.cost == pytest.approx((big + small) / 1e6)
    assert results[0].cost == pytest.approx(538 / 1e6)
    assert (results[0].prompt_tokens, results[0].completion_tokens) == (69, 100)
    assert results[0].algorithm == "static"
    assert decision_mix(results) == {"(default)": 4, "math": 2}


def test_a_question_subset_in_dataset_order():
    results, summary = run(config(default="big"), [4, 1])
    assert [r.question_id for r in results] == [1, 4]
    assert summary.accuracy == pytest.approx(1 / 2)  # big is right on 1, wrong on 4


def test_provider_model_id_names_the_dataset_model_and_an_unknown_model_is_not_scored():
    models = [model("frontier", provider_model_id="big"), model("ghost")]
    routing = {
        "signals": MATH_TO_BIG["signals"],
        "decisions": [{**MATH_TO_BIG["decisions"][0], "modelRefs": [{"model": "frontier"}]}],
    }
    results, summary = run(config(default="ghost", routing=routing, models=models))
    assert [r.dataset_model for r in results[:2]] == ["big", "big"]
    assert all(r.correct for r in results[:2])
    for row in results[2:]:
        assert row.model == "ghost" and row.dataset_model is None and not row.correct and row.cost == 0
        assert "'ghost' is not in the dataset" in (row.error or "")
    assert (summary.scored, summary.accuracy) == (
        2,
        pytest.approx(2 / 6),
    )  # an unscored question counts as wrong
    assert summary.cost == pytest.approx(((69 * 2 + 100 * 4) + (72 * 2 + 200 * 4)) / 1e6)


def test_no_route_is_a_row_not_a_crash():
    cfg = parse_config(
        {"version": "v0.3", "providers": {"models": [model("big")]}, "routing": MATH_TO_BIG}
    ).config
    results, summary = run(cfg)  # no default model: questions no decision takes have no route
    assert [r.error is None for r in results] == [True, True, False, False, False, False]
    assert all((r.error or "").startswith("not routed") and r.model is None for r in results[2:])
    assert (summary.scored, summary.accuracy) == (2, pytest.approx(2 / 6))


def test_the_config_may_be_a_file_and_runs_are_repeatable(tmp_path: Path):
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document(default="small", routing=MATH_TO_BIG)))
    first, summary = run(path)
    again, _ = run(path)
    assert first == again and summary.accuracy == pytest.approx(5 / 6)


def test_the_run_feeds_the_router_metrics_and_replay_records():
    from app.pipeline.metrics import RouterMetrics

    metrics = RouterMetrics()
    replays: list[dict[str, Any]] = []
    routing = {
        "signals": MATH_TO_BIG["signals"],
        "decisions": [
            {
                **MATH_TO_BIG["decisions"][0],
                "plugins": [{"type": "router_replay", "configuration": {"enabled": True}}],
            }
        ],
    }
    feeds = RunFeeds(metrics, replays.append)
    _, summary = run(config(default="small", routing=routing), feeds=feeds)
    recorder = metrics.recorder
    assert recorder.value("llm_model_requests_total", model="big") == 2
    assert recorder.value("llm_model_requests_total", model="small") == 4
    costs = sum(recorder.value("llm_model_cost_total", model=m, currency="USD") for m in ("big", "small"))
    assert costs == pytest.approx(summary.cost)
    assert len(replays) == 2  # the math decision records replays; the default model's questions do not


def test_only_the_families_the_config_uses_are_loaded():
    assert learned_families(config(routing=MATH_TO_BIG)) == frozenset()
    domain = {
        "signals": {"domains": [{"name": "math", "mmlu_categories": ["math"]}]},
        "decisions": [
            {
                "name": "m",
                "priority": 1,
                "rules": {"type": "domain", "name": "math"},
                "modelRefs": [{"model": "big"}],
            }
        ],
    }
    assert learned_families(config(routing=domain)) == frozenset({"domain"})
    guarded = {
        "signals": MATH_TO_BIG["signals"],
        "decisions": [
            {**MATH_TO_BIG["decisions"][0], "plugins": [{"type": "pii", "configuration": {"enabled": True}}]}
        ],
    }
    assert learned_families(config(routing=guarded)) == frozenset({"pii"})  # a decision's guard plugin


def test_domain_routing_embeds_every_question_once_before_routing():
    """The one test that loads the MiniLM encoder and the domain classifier."""
    routing = {
        "signals": {"domains": [{"name": "math", "mmlu_categories": ["math"]}]},
        "decisions": [
            {
                "name": "math",
                "priority": 10,
                "rules": {"type": "domain", "name": "math"},
                "modelRefs": [{"model": "big"}],
            }
        ],
    }
    table = VectorTable()
    phases: list[tuple[str, int, int]] = []
    results, summary = run(
        config(default="small", routing=routing), vectors=table, progress=lambda *p: phases.append(p)
    )
    assert len(table) == 6 and table.misses == 1  # the probe's question; the other five came from the table
    assert ("embed", 5, 5) in phases  # the five the probe did not embed and phases[-1] == ("route", 6, 6)
    assert all(r.error is None for r in results) and summary.scored == 6
    for row in results:  # whatever the classifier said, the decision and the model agree with it
        assert row.model == ("big" if row.decision == "math" else "small")
    again, _ = run(config(default="small", routing=routing), vectors=table)
    assert table.misses == 1 and again == results  # a second run (another config object) reuses the vectors
