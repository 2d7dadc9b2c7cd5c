"""What a benchmark run stores and prints: the wire shapes shared by the runner, the run
store, the report and the CLI (`svc-sr benchmark`).

A run lives in `<store>/runs/<run_id>/`: `run.json` (a `RunRecord`) and `results.jsonl`
(one `QuestionResult` per line, in dataset order). Costs are in the config's currency (USD in
every shipped config); tokens follow the dataset's rule (app/benchmark/dataset.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.benchmark.frontier import CurvePoint


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QuestionResult(_Record):
    """One question routed by the config and scored on the chosen model's recorded answer."""

    question_id: int
    category: str
    decision: str | None = None  # the matched decision (None: the default model answered)
    model: str | None = None  # the selected model's configured name (None: not routed)
    dataset_model: str | None = None  # the dataset's model whose recorded answer was scored
    correct: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    algorithm: str = "static"  # the decision's algorithm.type that chose the model
    error: str | None = None  # why the question was not scored (no route, model not in dataset)


class Summary(_Record):
    """The machine-readable summary (`run --json` prints it as its last line)."""

    accuracy: float
    cost: float
    questions: int
    scored: int = 0  # questions whose chosen model has a recorded answer
    cost_per_1k: float = 0.0  # cost of 1,000 queries at this run's mean (RouterArena's unit)
    cost_per_correct: float | None = None  # None when no answer was right


class RunRecord(_Record):
    run_id: str
    created_at: str  # ISO 8601, UTC
    dataset: str  # the dataset directory, absolute
    dataset_fingerprint: str  # sha256 of questions.jsonl + model_results.csv
    config: str  # the config file, absolute, or `<url>#version=N` for a replay of a live config
    config_fingerprint: str  # sha256 of the config document (canonical JSON)
    kind: str = "run"  # run | replay | regrade
    source_run: str | None = None  # a regrade's: the run whose routing it grades again
    question_ids: list[int] | None = None  # a subset (--ids, --fold); None: every question
    summary: Summary
    decision_mix: dict[str, int] = Field(default_factory=dict)  # decision (or "(default)") -> questions
    model_mix: dict[str, int] = Field(default_factory=dict)  # model -> questions
    duration_s: float = 0.0
    # `--cross-validate`: "5" (folds by question) or "category"; the results are each fold's,
    # routed by predictors trained on the other folds (app/benchmark/crossval.py).
    cross_validation: str | None = None
    sweep: str | None = None  # `--sweep`: the knob and its values, as given
    curve: list[CurvePoint] = Field(default_factory=list)  # the run at each knob value
