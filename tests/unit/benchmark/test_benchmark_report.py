"""The benchmark report's numbers, the baselines and the comparison of two runs, on
tests/fakes/benchmark_mini computed by hand (app/benchmark/{baselines,report,export}.py).

The mini dataset, with the token rule prompt = round(len(question)/4 + 60),
completion = round(output_chars/4) (Python rounds halves to even):

    q  category  len  prompt | completion big/mid/small | right: big mid small
    1  math       37  69     | 100  50  25               |       1   1   0
    2  math       48  72     | 200 100  50               |       1   0   0
    3  law        86  82     | 300 150  75               |       1   1   1
    4  law        63  76     | 100 100 100               |       0   1   0
    5  biology    46  72     |  50  50  50               |       1   1   1
    6  biology    67  77     | 150  75  25               |       1   0   1

Prices ($ per 1M tokens, prompt = completion): big 10, mid 2, small 1, so an answer costs
(prompt + completion) x price / 1e6. Tokens per answer (prompt + completion), big/mid/small:
q1 169/119/94, q2 272/172/122, q3 382/232/157, q4 176/176/176, q5 122/122/122, q6 227/152/102.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import NamedTuple

import pytest

from app.benchmark.baselines import compute_baselines
from app.benchmark.export import export_csv, export_json
from app.benchmark.records import QuestionResult, RunRecord, Summary
from app.benchmark.report import build_report, compare_runs, run_point
from app.config.pricing import Pricing

MINI = Path(__file__).parents[2] / "fakes" / "benchmark_mini"
MICRO = 1e-6  # $ per token at a price of $1 per 1M tokens


class Answer(NamedTuple):
    correct: bool
    prompt_tokens: int
    completion_tokens: int


QUESTIONS = {1: "math", 2: "math", 3: "law", 4: "law", 5: "biology", 6: "biology"}
PROMPT = {1: 69, 2: 72, 3: 82, 4: 76, 5: 72, 6: 77}
COMPLETION = {  # (big, mid, small)
    1: (100, 50, 25),
    2: (200, 100, 50),
    3: (300, 150, 75),
    4: (100, 100, 100),
    5: (50, 50, 50),
    6: (150, 75, 25),
}
RIGHT = {1: (1, 1, 0), 2: (1, 0, 0), 3: (1, 1, 1), 4: (0, 1, 0), 5: (1, 1, 1), 6: (1, 0, 1)}
MODELS = ("big", "mid", "small")
ANSWERS = {
    (q, model): Answer(bool(RIGHT[q][i]), PROMPT[q], COMPLETION[q][i])
    for q in QUESTIONS
    for i, model in enumerate(MODELS)
}
PRICE = {"big": 10.0, "mid": 2.0, "small": 1.0}


def _pricing(*models: str) -> dict[str, Pricing | None]:
    return {m: Pricing(prompt_per_1m=PRICE[m], completion_per_1m=PRICE[m]) for m in models}


def _cost(question: int, model: str) -> float:
    i = MODELS.index(model)
    return (PROMPT[question] + COMPLETION[question][i]) * PRICE[model] * MICRO


def test_the_fixture_tables_match_the_token_rule_and_the_dataset_files() -> None:
    # the tables above, re-derived from the files: the test data is what the comments say
    lines = (MINI / "questions.jsonl").read_text().splitlines()
    questions = {row["question_id"]: row for row in map(json.loads, lines)}
    assert {q: questions[q]["category"] for q in questions} == QUESTIONS
    assert {q: round(len(questions[q]["question"]) / 4 + 60) for q in questions} == PROMPT
    with (MINI / "model_results.csv").open() as handle:
        for row in csv.DictReader(handle):
            answer = ANSWERS[int(row["question_id"]), row["model"]]
            assert answer.correct == (row["correct"] == "1")
            assert answer.completion_tokens == round(int(row["output_chars"]) / 4)


def test_single_models() -> None:
    baselines = compute_baselines(QUESTIONS, ANSWERS, _pricing(*MODELS))
    points = {p.name: p for p in baselines.models}
    assert [p.name for p in baselines.models] == ["big", "mid", "small"]
    # big: right on all but q4 = 5/6; (169+272+382+176+122+227) = 1348 tokens x $10/1M
    assert points["big"].correct == 5
    assert points["big"].accuracy == pytest.approx(5 / 6)
    assert points["big"].cost == pytest.approx(0.01348)
    # mid: right on q1, q3, q4, q5 = 4/6; (119+172+232+176+122+152) = 973 tokens x $2/1M
    assert points["mid"].accuracy == pytest.approx(4 / 6)
    assert points["mid"].cost == pytest.approx(0.001946)
    # small: right on q3, q5, q6 = 3/6; (94+122+157+176+122+102) = 773 tokens x $1/1M
    assert points["small"].accuracy == pytest.approx(0.5)
    assert points["small"].cost == pytest.approx(0.000773)
    # cost per 1,000 queries: mean cost per question x 1000 = 0.000773 / 6 x 1000
    assert points["small"].cost_per_1k == pytest.approx(0.000773 / 6 * 1000)


def test_per_category_best_picks_the_most_accurate_then_the_cheaper_model() -> None:
    baselines = compute_baselines(QUESTIONS, ANSWERS, _pricing(*MODELS))
    # math: big 2/2 beats mid 1/2; law: mid 2/2 beats big 1/2 and small 1/2;
    # biology: big and small both 2/2, small is cheaper (224 tokens x $1 < 349 x $10)
    assert baselines.category_choice == {"biology": "small", "law": "mid", "math": "big"}
    best = baselines.category_best
    assert (best.correct, best.questions) == (6, 6)
    # big on q1+q2: 441 x 10; mid on q3+q4: 408 x 2; small on q5+q6: 224 x 1 (x 1e-6)
    assert best.cost == pytest.approx((441 * 10 + 408 * 2 + 224) * MICRO)


def test_oracle_takes_the_cheapest_right_model() -> None:
    oracle = compute_baselines(QUESTIONS, ANSWERS, _pricing(*MODELS)).oracle
    # q1 mid (119x2=238), q2 big (272x10=2720), q3 small 157, q4 mid (176x2=352), q5 small 122,
    # q6 small 102: every question right
    assert oracle.accuracy == 1.0
    assert oracle.cost == pytest.approx((238 + 2720 + 157 + 352 + 122 + 102) * MICRO)


def test_oracle_without_a_right_model_takes_the_cheapest() -> None:
    # only mid and small: nobody is right on q2, so the oracle pays small's 122 x $1 there
    baselines = compute_baselines(QUESTIONS, ANSWERS, _pricing("mid", "small"))
    oracle = baselines.oracle
    # right: q1 mid 238, q3 small 157, q4 mid 352, q5 small 122, q6 small 102; q2 wrong 122
    assert (oracle.correct, oracle.questions) == (5, 6)
    assert oracle.cost == pytest.approx((238 + 122 + 157 + 352 + 122 + 102) * MICRO)
    # and the per-category best: math mid (1/2; small 0/2), law mid (2/2), biology small (2/2)
    assert baselines.category_choice == {"biology": "small", "law": "mid", "math": "mid"}
    assert baselines.category_best.correct == 5
    assert baselines.category_best.cost == pytest.approx(((119 + 172) * 2 + 408 * 2 + 224) * MICRO)


def test_baselines_on_a_subset_of_questions() -> None:
    # the run's questions only: q3, q4 (law): big 1/2, mid 2/2, small 1/2
    baselines = compute_baselines({3: "law", 4: "law"}, ANSWERS, _pricing(*MODELS))
    assert baselines.questions == 2
    assert [p.correct for p in baselines.models] == [1, 2, 1]
    assert baselines.category_choice == {"law": "mid"}


def test_a_missing_answer_counts_as_wrong_and_free() -> None:
    answers = {key: value for key, value in ANSWERS.items() if key != (1, "big")}
    big = compute_baselines(QUESTIONS, answers, _pricing("big")).models[0]
    assert (big.correct, big.questions) == (4, 6)
    assert big.cost == pytest.approx((1348 - 169) * 10 * MICRO)


def result(question: int, model: str | None, decision: str | None = None, **fields: object) -> QuestionResult:
    """A routed question scored on `model`'s recorded answer (unless `fields` say otherwise)."""
    if model in MODELS:
        i = MODELS.index(model)
        scored: dict[str, object] = {
            "dataset_model": model,
            "correct": bool(RIGHT[question][i]),
            "prompt_tokens": PROMPT[question],
            "completion_tokens": COMPLETION[question][i],
            "cost": _cost(question, model),
        }
    else:
        scored = {}
    values = {"question_id": question, "category": QUESTIONS[question], "decision": decision, "model": model}
    return QuestionResult.model_validate(values | scored | fields)


def record(run_id: str, results: list[QuestionResult], **fields: object) -> RunRecord:
    correct = sum(r.correct for r in results)
    cost = sum(r.cost for r in results)
    values: dict[str, object] = {
        "run_id": run_id,
        "created_at": "2026-11-25T00:00:00Z",
        "dataset": "/data/benchmark_mini",
        "dataset_fingerprint": "0" * 64,
        "config": "/configs/mini.yaml",
        "config_fingerprint": "1" * 64,
        "summary": Summary(accuracy=correct / len(results), cost=cost, questions=len(results)),
    }
    return RunRecord.model_validate(values | fields)


# Run A: everything to small by the default model. Run B: math -> big, law -> mid (decisions),
# biology by the default to small, but q6 to `tiny`, a model the dataset never recorded.
RUN_A = [result(q, "small") for q in QUESTIONS]
RUN_B = [
    result(1, "big", "math"),
    result(2, "big", "math"),
    result(3, "mid", "law"),
    result(4, "mid", "law"),
    result(5, "small"),
    result(6, "tiny", error="model not in dataset"),
]


def test_report_numbers() -> None:
    report = build_report(record("b", RUN_B), RUN_B)
    # right: q1..q5; q6 unscored counts as wrong: 5/6
    assert (report.questions, report.scored, report.correct) == (6, 5, 5)
    assert report.accuracy == pytest.approx(5 / 6)
    # q1 169x10 + q2 272x10 + q3 232x2 + q4 176x2 + q5 122x1 (+ q6 0) = 5348 x 1e-6
    assert report.cost == pytest.approx(0.005348)
    assert report.cost_per_1k == pytest.approx(0.005348 / 6 * 1000)  # = $0.8913
    assert report.cost_per_correct == pytest.approx(0.005348 / 5)
    rows = {row.category: row for row in report.categories}
    assert [row.category for row in report.categories] == ["biology", "law", "math"]
    assert (rows["biology"].questions, rows["biology"].correct) == (2, 1)
    assert rows["biology"].cost == pytest.approx(122 * MICRO)
    assert rows["biology"].models == {"small": 1, "tiny": 1}
    assert rows["law"].accuracy == 1.0
    assert rows["law"].cost == pytest.approx((232 + 176) * 2 * MICRO)
    assert rows["math"].models == {"big": 2}
    assert rows["math"].cost == pytest.approx((169 + 272) * 10 * MICRO)
    assert report.decision_mix == {"(default)": 2, "law": 2, "math": 2}
    assert report.model_mix == {"big": 2, "mid": 2, "small": 1, "tiny": 1}
    assert report.errors == {"model not in dataset": 1}
    assert run_point(report).cost_per_1k == pytest.approx(report.cost_per_1k)


def test_report_without_a_right_answer_has_no_cost_per_correct() -> None:
    rows = [result(2, "small"), result(4, "small")]  # both wrong
    assert build_report(record("w", rows), rows).cost_per_correct is None


def test_compare_two_runs() -> None:
    comparison = compare_runs((record("a", RUN_A), RUN_A), (record("b", RUN_B), RUN_B))
    assert (comparison.questions, comparison.only_in_a, comparison.only_in_b) == (6, 0, 0)
    # A (all small): right q3, q5, q6 = 3/6 at 773e-6; B: 5/6 at 5348e-6
    assert comparison.accuracy_delta == pytest.approx(5 / 6 - 3 / 6)
    assert comparison.cost_delta == pytest.approx((5348 - 773) * MICRO)
    # the same model only on q5 (small)
    assert comparison.same_model == 1
    # (A, B) per question: q1 (no, yes), q2 (no, yes), q3 (yes, yes), q4 (no, yes),
    # q5 (yes, yes), q6 (yes, no: B's model has no answer)
    assert comparison.right_only_in_a == 1
    assert comparison.right_only_in_b == 3
    assert (comparison.both_right, comparison.both_wrong) == (2, 0)
    rows = {row.category: row for row in comparison.categories}
    # biology: A 2/2 (122+102 tokens x $1) vs B 1/2 (122)
    assert rows["biology"].accuracy_delta == pytest.approx(-0.5)
    assert rows["biology"].cost_delta == pytest.approx(-102 * MICRO)
    # law: A 1/2 (157+176) vs B 2/2 (408 x 2); math: A 0/2 (94+122) vs B 2/2 (441 x 10)
    assert rows["law"].cost_delta == pytest.approx((816 - 333) * MICRO)
    assert rows["math"].accuracy_delta == pytest.approx(1.0)
    assert rows["math"].cost_delta == pytest.approx((4410 - 216) * MICRO)


def test_compare_runs_on_their_shared_questions_only() -> None:
    part = RUN_A[:2]  # q1, q2 (both wrong with small)
    comparison = compare_runs((record("a", part), part), (record("b", RUN_B), RUN_B))
    assert (comparison.questions, comparison.only_in_a, comparison.only_in_b) == (2, 0, 4)
    assert (comparison.accuracy_a, comparison.accuracy_b) == (0.0, 1.0)
    assert comparison.right_only_in_b == 2


def test_json_export_round_trips() -> None:
    run = record("b", RUN_B)
    exported = json.loads(export_json(run, RUN_B))
    assert RunRecord.model_validate(exported["run"]) == run
    assert [QuestionResult.model_validate(row) for row in exported["results"]] == RUN_B


def test_csv_export_round_trips() -> None:
    rows = list(csv.DictReader(io.StringIO(export_csv(RUN_B).decode())))
    assert len(rows) == 6
    assert rows[5]["error"] == "model not in dataset"
    assert rows[4]["decision"] == ""  # the default model answered
    # an empty cell is an absent value; everything else QuestionResult reads back as written
    back = [QuestionResult.model_validate({k: v for k, v in row.items() if v}) for row in rows]
    assert back == RUN_B
