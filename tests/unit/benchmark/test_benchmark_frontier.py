"""The frontier report (app/benchmark/frontier.py): the hull of fixed mixes, APGR and the margin
at fixed budgets, on hand-computed numbers; then through `svc-sr benchmark run --sweep` and
`report --json` on the mini dataset (tests/fakes/benchmark_mini), and `--cross-validate`.

Mini dataset, per model (cost per 1M tokens; tokens by the dataset's rule, see
test_benchmark_runner.py): small right on 3, 5, 6 for 77.3; mid right on 1, 3, 4, 5 for 486.5;
big right on all but 4 for 4,496. Per 1,000 queries: cost / 6 questions x 1000 x 1e-6.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner, Result

from app.benchmark import crossval
from app.benchmark.baselines import point
from app.benchmark.frontier import CurvePoint, compute_frontier, hull_accuracy, upper_hull
from app.benchmark.store import RunStore
from app.cli.main import cli
from app.cli.remote import EXIT_INVALID
from app.models.quality_mf import FactorQuality, Heads, Trunk, logit
from app.models.selection import save_mf
from tests.unit.benchmark.test_benchmark_runner import MATH_TO_BIG, MINI, document

PER_1K = 1e-6 / 6 * 1000  # a mini-dataset cost (per 1M tokens) as $ per 1,000 queries
SMALL, MID, BIG = 77.3, 486.5, 4496.0
ORACLE = 59.5 + 944 + 15.7 + 88 + 12.2 + 10.2  # mid, big, small, mid, small, small: all right


def p(name: str, accuracy: float, cost_per_1k: float, questions: int = 60) -> Any:
    return point(name, questions, round(accuracy * questions), cost_per_1k * questions / 1000)


def test_the_hull_leaves_out_models_under_a_mix_and_dearer_than_the_best():
    a, b, c = p("a", 0.5, 1.0), p("b", 4 / 6, 2.0), p("c", 5 / 6, 10.0)
    under = p("under", 4 / 6, 6.0)  # below the b-c line (0.75 there)
    waste = p("waste", 4 / 6, 20.0)  # dearer than the most accurate, less accurate
    assert [h.name for h in upper_hull([c, under, a, waste, b])] == ["a", "b", "c"]
    # b lies under the a-c line when it is less accurate: the mix of a and c beats it
    assert [h.name for h in upper_hull([a, p("b", 0.5, 5.0), c])] == ["a", "c"]
    hull = upper_hull([a, b, c])
    assert hull_accuracy(hull, 0.5) is None  # cheaper than any model
    assert hull_accuracy(hull, 6.0) == pytest.approx(4 / 6 + (5 / 6 - 4 / 6) * 4 / 8)
    assert hull_accuracy(hull, 50.0) == pytest.approx(5 / 6)  # flat after the best


def test_apgr_of_the_straight_line_is_a_half_and_of_the_strong_accuracy_at_the_weak_cost_one():
    weak, strong = p("weak", 0.6, 1.0), p("strong", 0.8, 5.0)
    on_line = [CurvePoint(knob="x", point=p("mid", 0.7, 3.0)), CurvePoint(knob="y", point=p("top", 0.8, 5.0))]
    line = compute_frontier([weak, strong], on_line)
    assert (line.weak, line.strong) == ("weak", "strong")
    assert line.apgr == pytest.approx(0.5)
    # above its dearest point the router's curve stays flat: it cannot spend more
    short = compute_frontier([weak, strong], on_line[:1])
    assert short.apgr == pytest.approx(((0.6 + 0.7) / 2 * 2 + 0.7 * 2) / 4 / 0.2 - 3)
    assert all(m.margin == pytest.approx(0.0) for m in line.margins)
    best = compute_frontier([weak, strong], [CurvePoint(knob="x", point=p("r", 0.8, 1.0))])
    assert best.apgr == pytest.approx(1.0)
    # margins at the weak model's cost, then 15 %... of the strong's (5.0): 0.75 1.25 1.75 2.5 3.75 5
    assert [m.cost_per_1k for m in best.margins] == pytest.approx([1.0, 1.25, 1.75, 2.5, 3.75, 5.0])
    assert best.margins[0].margin == pytest.approx(0.2)
    assert best.margins[-1].margin == pytest.approx(0.0)
    with pytest.raises(ValueError, match="not one of the run's models"):
        compute_frontier([weak, strong], [], weak="nobody")


def constant_mf(path: Path, quality: dict[str, float], tokens: float = 50.0) -> Path:
    """An mf artifact whose every prediction is `quality` and `tokens`: all weights zero, the
    biases saying it (so a test can compute each choice by hand)."""
    models = tuple(quality)
    m, d, rank = len(models), 384, 2
    zeros = np.zeros
    model = FactorQuality(
        models=models,
        mean_completion_tokens=np.full(m, tokens),
        trunk=Trunk(zeros(d), np.ones(d), zeros((d, rank)), zeros(rank), zeros((rank, rank)), zeros(rank)),
        heads=Heads(
            quality=zeros((rank, m)),
            quality_bias=logit(np.array(list(quality.values()))),
            length=zeros((rank, m)),
            length_bias=zeros(m),
            length_center=np.full(m, np.log1p(tokens)),
            length_scale=np.ones(m),
            length_smear=np.ones(m),
            slope=np.ones(m),
            intercept=zeros(m),
            blend=zeros(m),
        ),  # fmt: skip
        neighbours=None,
        reference=None,
    )
    save_mf(path, model)
    return path


def learned_config(tmp_path: Path, artifact: Path) -> Path:
    routing = json.loads(json.dumps(MATH_TO_BIG))
    routing["decisions"][0]["priority"] = 200
    routing["decisions"].append(
        {
            "name": "learned",
            "priority": 100,
            "modelRefs": [{"model": "big"}, {"model": "mid"}, {"model": "small"}],
            "algorithm": {"type": "mf", "ml": {"mf": {"pretrained_path": str(artifact)}}},
        }
    )
    path = tmp_path / "learned.yaml"
    path.write_text(yaml.safe_dump(document(default="small", routing=routing)))
    return path


def invoke(store: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["benchmark", "--store", str(store), *args], catch_exceptions=False)


def test_a_swept_run_reports_the_hull_the_oracle_and_apgr_by_hand(tmp_path: Path):
    artifact = constant_mf(tmp_path / "mf.npz", {"big": 0.9, "mid": 0.7, "small": 0.5})
    config = learned_config(tmp_path, artifact)
    store = tmp_path / "store"
    # cost_quality_tradeoff t: value (1 - t) q - t cost / big's cost. Math (1, 2) goes to big by
    # keyword; the rest: t = 0 big, t = 0.3 mid (0.7 * 0.7 - 0.3 * ~0.14 > 0.7 * 0.9 - 0.3),
    # t = 0.7 small (0.3 * 0.5 - 0.7 * ~0.03 > 0.3 * 0.7 - 0.7 * ~0.14).
    ran = invoke(
        store, "run", "--dataset", str(MINI), "--config", str(config),
        "--sweep", "cost_quality_tradeoff=0,0.3,0.7", "--json",
    )  # fmt: skip
    assert ran.exit_code == 0, ran.stderr
    [record] = RunStore(store).list_runs()
    assert record.sweep == "cost_quality_tradeoff=0,0.3,0.7" and len(record.curve) == 3
    reported = invoke(store, "report", record.run_id, "--json")
    assert reported.exit_code == 0, reported.stderr
    report = json.loads(reported.stdout)
    frontier, baselines = report["frontier"], report["baselines"]
    assert baselines["oracle"]["accuracy"] == 1.0
    assert baselines["oracle"]["cost_per_1k"] == pytest.approx(ORACLE * PER_1K)
    assert [(h["name"], h["accuracy"], h["cost_per_1k"]) for h in frontier["hull"]] == [
        ("small", 0.5, pytest.approx(SMALL * PER_1K)),
        ("mid", pytest.approx(4 / 6), pytest.approx(MID * PER_1K)),
        ("big", pytest.approx(5 / 6), pytest.approx(BIG * PER_1K)),
    ]
    assert {(m["cheap"], m["dear"]) for m in frontier["pairs"]} == {
        ("small", "mid"),
        ("small", "big"),
        ("mid", "big"),
    }
    small_rest = 538 + 944 + 15.7 + 17.6 + 12.2 + 10.2  # math on big, 3-6 on small: 4 wrong
    mid_rest = 538 + 944 + 116 + 88 + 61 + 76  # 3-6 on mid: 6 wrong
    assert [(c["knob"], c["point"]["correct"], c["point"]["cost_per_1k"]) for c in frontier["curve"]] == [
        ("cost_quality_tradeoff=0.7", 5, pytest.approx(small_rest * PER_1K)),
        ("cost_quality_tradeoff=0.3", 5, pytest.approx(mid_rest * PER_1K)),
        ("cost_quality_tradeoff=0", 5, pytest.approx(BIG * PER_1K)),
    ]
    assert (frontier["weak"], frontier["strong"]) == ("mid", "big")
    # The curve from mid's point (weak) to t=0.7's, then flat at 5/6 to big's cost:
    area = (small_rest - MID) * (4 / 6 + 5 / 6) / 2 + (BIG - small_rest) * 5 / 6
    assert frontier["apgr"] == pytest.approx((area / (BIG - MID) - 4 / 6) / (1 / 6))
    assert frontier["apgr"] == pytest.approx(0.8689, abs=1e-4)
    first, at_15 = frontier["margins"][:2]
    assert first["cost_per_1k"] == pytest.approx(MID * PER_1K) and first["margin"] == pytest.approx(0.0)
    budget = 0.15 * BIG
    router = 4 / 6 + (budget - MID) / (small_rest - MID) / 6
    hull = 4 / 6 + (budget - MID) / (BIG - MID) / 6
    assert at_15["router"] == pytest.approx(router) and at_15["margin"] == pytest.approx(router - hull)
    text = invoke(store, "report", record.run_id)
    assert "APGR 0.869" in text.stdout and "at fixed budgets" in text.stdout
    plotted = invoke(store, "report", record.run_id, "--plot", str(tmp_path / "plot.png"))
    assert plotted.exit_code == 0 and (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def test_a_cross_validated_run_trains_each_fold_without_its_questions(tmp_path: Path, monkeypatch):
    config = learned_config(
        tmp_path, constant_mf(tmp_path / "mf.npz", {"big": 0.9, "mid": 0.7, "small": 0.5})
    )
    trained: list[int] = []
    real = crossval.fit_mf

    def spy(data: Any, models: Any) -> Any:
        trained.append(len(data.vectors))
        return real(data, models)

    monkeypatch.setattr(crossval, "fit_mf", spy)
    store = tmp_path / "store"
    ran = invoke(
        store, "run", "--dataset", str(MINI), "--config", str(config), "--cross-validate", "category"
    )
    assert ran.exit_code == 0, ran.stderr
    assert trained == [4, 4, 4]  # three categories of two questions: each fold trains on the other four
    [record] = RunStore(store).list_runs()
    assert record.cross_validation == "category" and record.summary.scored == 6
    report = json.loads(invoke(store, "report", record.run_id, "--json").stdout)
    assert report["cross_validation"] == "category" and report["frontier"]["curve"][0]["knob"] == "run"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "budget=1"], "--sweep takes one of budget_per_1k, cost_quality_tradeoff"),
        (["--sweep", "cost_quality_tradeoff=2"], "values lie in [0, 1]"),
        (["--cross-validate", "1"], "number of folds (2-20) or 'category'"),
    ],
)
def test_bad_sweeps_and_folds_are_one_message(tmp_path: Path, args: list[str], message: str):
    config = learned_config(
        tmp_path, constant_mf(tmp_path / "mf.npz", {"big": 0.9, "mid": 0.7, "small": 0.5})
    )
    store = tmp_path / "store"
    result = invoke(store, "run", "--dataset", str(MINI), "--config", str(config), *args)
    assert result.exit_code == EXIT_INVALID and message in result.stderr
    assert RunStore(store).run_ids() == []


def test_a_budget_sweep_needs_an_mf_decision(tmp_path: Path):
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(document(default="small", routing=MATH_TO_BIG)))
    result = invoke(
        tmp_path / "s", "run", "--dataset", str(MINI), "--config", str(plain), "--sweep", "budget_per_1k=1"
    )
    assert result.exit_code == EXIT_INVALID and "needs a decision whose algorithm" in result.stderr


def test_the_routing_table_margin_interval_is_paired_per_question_against_the_hull_mix():
    """scripts/evaluate_routing.py's margin (docs/routing-quality.md): at a cost halfway from
    mid to big the hull's mix scores (mid + big) / 2 on each question; a router right on all
    six is ahead by 0.5 on 2 and 6 (mid's misses) and 4 (big's), by 0 elsewhere."""
    import importlib.util
    from types import SimpleNamespace

    from app.benchmark.dataset import Dataset

    path = Path(__file__).resolve().parents[3] / "scripts" / "evaluate_routing.py"
    spec = importlib.util.spec_from_file_location("evaluate_routing", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    dataset = Dataset.load(MINI)
    hull = [p("small", 0.5, SMALL), p("mid", 4 / 6, MID), p("big", 5 / 6, BIG)]
    rows = [SimpleNamespace(question_id=qid, correct=True) for qid in range(1, 7)]
    margin, half = script.margin_interval(rows, (MID + BIG) / 2, hull, dataset)
    assert margin == pytest.approx(0.25)
    assert half == pytest.approx(1.96 * 0.25 * np.sqrt(6 / 5) / np.sqrt(6))
    assert script.margin_interval(rows, BIG * 2, hull, dataset) is None  # beyond the hull
    assert script.accuracy_interval(p("x", 0.5, 1.0, questions=100)) == pytest.approx(0.098)
