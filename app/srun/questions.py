"""Wire shapes of decision requests and answers (spec 2 "Decision request" / "Decision response").

A question takes one form only (criteria map/list, or the list form `choices` / `levels` /
`labels`) and only the fields of its type; `parse_question` validates one question alone so
that an invalid question is answered with `invalid_question` while the others are answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

QuestionType = Literal["choice", "noul", "score", "set", "span"]
QUESTION_TYPES: tuple[str, ...] = ("choice", "noul", "score", "set", "span")
INVALID_QUESTION: Literal["invalid_question"] = "invalid_question"
K = TypeVar("K", bound=str)  # an option key: any string, or a fixed set (noul: "false"/"true")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KeyedOption(_Strict):
    key: str = Field(min_length=1, max_length=256)
    description: str = Field(default="", max_length=4096)


class _Question(_Strict):
    instructions: str | None = Field(default=None, max_length=4096)
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)

    def options(self) -> list[tuple[str, str]]:
        """(key, description) pairs in the question's order, whichever form it used."""
        raise NotImplementedError


def _one_form(a: Any, b: Any, names: tuple[str, str], required: bool = True) -> None:
    if a is not None and b is not None:
        raise ValueError(f"use either {names[0]} or {names[1]}, not both")
    if required and a is None and b is None:
        raise ValueError(f"one of {names[0]} or {names[1]} is required")


def _keyed(criteria: Mapping[K, str] | None, listed: list[KeyedOption] | None) -> list[tuple[str, str]]:
    if criteria is not None:
        return list(criteria.items())
    return [(o.key, o.description) for o in listed or []]


def _check_count(pairs: list[tuple[str, str]], low: int, high: int, what: str) -> None:
    if not low <= len(pairs) <= high:
        raise ValueError(f"{len(pairs)} {what}; between {low} and {high} are allowed")
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate {what[:-1]} keys")


class ChoiceQuestion(_Question):
    type: Literal["choice"]
    criteria: dict[str, str] | None = None
    choices: list[KeyedOption] | None = None

    @model_validator(mode="after")
    def _check(self) -> ChoiceQuestion:
        _one_form(self.criteria, self.choices, ("criteria", "choices"))
        _check_count(self.options(), 2, 255, "options")
        return self

    def options(self) -> list[tuple[str, str]]:
        return _keyed(self.criteria, self.choices)


class NoulQuestion(_Question):
    type: Literal["noul"]
    criteria: dict[Literal["false", "true"], str] | None = None
    choices: list[KeyedOption] | None = None

    @model_validator(mode="after")
    def _check(self) -> NoulQuestion:
        _one_form(self.criteria, self.choices, ("criteria", "choices"), required=False)
        for option in self.choices or []:
            if option.key not in ("false", "true"):
                raise ValueError(f"choices: key {option.key!r} must be 'false' or 'true'")
        _check_count(self.options(), 0, 2, "options")
        return self

    def options(self) -> list[tuple[str, str]]:
        return _keyed(self.criteria, self.choices)


class ScoreQuestion(_Question):
    type: Literal["score"]
    criteria: list[str] | None = None
    levels: list[str] | None = None

    @model_validator(mode="after")
    def _check(self) -> ScoreQuestion:
        _one_form(self.criteria, self.levels, ("criteria", "levels"))
        levels = self.criteria if self.criteria is not None else self.levels or []
        if not 2 <= len(levels) <= 10:
            raise ValueError(f"{len(levels)} levels; between 2 and 10 are allowed")
        return self

    def options(self) -> list[tuple[str, str]]:
        levels = self.criteria if self.criteria is not None else self.levels or []
        return [(str(i), text) for i, text in enumerate(levels)]


class _LabelQuestion(_Question):
    """Labels to pick from, each independently (set) or per span of the text (span)."""

    criteria: dict[str, str] | None = None
    labels: list[KeyedOption] | None = None

    @model_validator(mode="after")
    def _check(self) -> _LabelQuestion:
        _one_form(self.criteria, self.labels, ("criteria", "labels"))
        _check_count(self.options(), 1, 255, "labels")
        return self

    def options(self) -> list[tuple[str, str]]:
        return _keyed(self.criteria, self.labels)


class SetQuestion(_LabelQuestion):
    type: Literal["set"]


class SpanQuestion(_LabelQuestion):
    type: Literal["span"]


Question = ChoiceQuestion | NoulQuestion | ScoreQuestion | SetQuestion | SpanQuestion
_BY_TYPE: dict[str, type[Question]] = {
    "choice": ChoiceQuestion,
    "noul": NoulQuestion,
    "score": ScoreQuestion,
    "set": SetQuestion,
    "span": SpanQuestion,
}


class QuestionError(ValueError):
    """One invalid question; `message` names the offending field."""

    def __init__(self, qtype: str, message: str) -> None:
        super().__init__(message)
        self.qtype = qtype
        self.message = message


def parse_question(qid: str, raw: Any) -> Question:
    if not isinstance(raw, dict):
        raise QuestionError("unknown", f"questions.{qid}: must be an object")
    qtype = raw.get("type")
    if qtype not in _BY_TYPE:
        raise QuestionError(
            str(qtype or "unknown"), f"questions.{qid}.type: must be one of {', '.join(QUESTION_TYPES)}"
        )
    try:
        return _BY_TYPE[qtype].model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = f"not a field of a {qtype} question"
        raise QuestionError(qtype, f"questions.{qid}{'.' + where if where else ''}: {msg}") from None


# --------------------------------------------------------------------------- requests


class DecisionOptions(_Strict):
    return_meta: bool = False
    max_tokens: int | None = Field(default=None, ge=3, description="capped by the card's max_input_tokens")


class NestedState(_Strict):
    state: str = ""
    questions: dict[str, Any] = Field(default_factory=dict)


class DecisionRequest(_Strict):
    model: str | None = None
    state: str = ""
    questions: dict[str, Any] = Field(default_factory=dict, description="question id -> question")
    states: dict[str, NestedState] | None = None
    images: list[str] | None = None
    videos: list[str] | None = None
    options: DecisionOptions = Field(default_factory=DecisionOptions)

    @model_validator(mode="after")
    def _check(self) -> DecisionRequest:
        total = len(self.questions) + sum(len(s.questions) for s in (self.states or {}).values())
        if total > 1024:
            raise ValueError(f"{total} questions; at most 1024 per request")
        if self.states is not None and len(self.states) > 64:
            raise ValueError("states: at most 64 entries")
        return self


# --------------------------------------------------------------------------- answers


class _Wire(BaseModel):
    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class ChoiceAnswer(_Wire):
    type: Literal["choice"] = "choice"
    choice: str | None = Field(description="the most probable option; null below the question's threshold")
    confidence: float
    probabilities: dict[str, float]
    abstain_probability: float


class NoulAnswer(_Wire):
    type: Literal["noul"] = "noul"
    noul: float = Field(ge=0.0, le=1.0, description="probability that the statement is true")


class ScoreAnswer(_Wire):
    type: Literal["score"] = "score"
    score: float | None = Field(description="expected level index (0-based); null below the threshold")
    confidence: float
    legend: dict[str, str]
    probabilities: dict[str, float]


class InvalidAnswer(_Wire):
    type: str
    error: Literal["invalid_question"] = INVALID_QUESTION
    message: str


Answer = ChoiceAnswer | NoulAnswer | ScoreAnswer | InvalidAnswer


class SetResult(_Wire):
    selected: list[str]
    probabilities: dict[str, float]


class SpanOut(_Wire):
    label: str
    start: int = Field(ge=0, description="Unicode code point offset, inclusive")
    end: int = Field(ge=0, description="Unicode code point offset, exclusive")
    text: str
    probability: float


class DecisionUsage(_Wire):
    tokens: int = 0
    tokens_lower_bound: bool | None = None


class NestedDecisionResponse(_Wire):
    model: str
    answers: dict[str, Answer] = Field(default_factory=dict)
    sets: dict[str, SetResult] | None = None
    spans: dict[str, list[SpanOut]] | None = None
    thresholds: dict[str, float] = Field(default_factory=dict)
    usage: DecisionUsage = Field(default_factory=DecisionUsage)


class DecisionResponse(NestedDecisionResponse):
    meta: dict[str, Any] | None = None
    states: dict[str, NestedDecisionResponse] | None = None
