"""Wire shapes of decision requests and answers (/v1/decisions, docs/model-runtime.md).

A question takes one form only (criteria map/list, or the list form `choices` / `levels` /
`labels`) and only the fields of its type; `parse_question` validates one question alone so
that an invalid question is answered with `invalid_question` while the others are answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, model_validator

from app.common.api_docs import Absent, DocumentedAs, SchemaKeys, exactly_one, no_default

QuestionType = Literal["choice", "noul", "score", "set", "span"]
QUESTION_TYPES: tuple[str, ...] = ("choice", "noul", "score", "set", "span")
INVALID_QUESTION: Literal["invalid_question"] = "invalid_question"
K = TypeVar("K", bound=str)  # an option key: any string, or a fixed set (noul: "false"/"true")
ABSENT = Field(default=None, json_schema_extra=no_default)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KeyedOption(_Strict):
    key: str = Field(min_length=1, max_length=256)
    description: str = Field(default="", max_length=4096)


class NoulOption(KeyedOption):
    """A noul question's list-form option, as documented (validated as a KeyedOption)."""

    key: Literal["false", "true"]


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


def _keyed(criteria: Mapping[K, str] | None, listed: list[Any] | None) -> list[tuple[str, str]]:
    if criteria is not None:
        return list(criteria.items())
    return [(o.key, o.description) for o in listed or []]


def _check_count(pairs: list[tuple[str, str]], low: int, high: int, what: str) -> None:
    if not low <= len(pairs) <= high:
        raise ValueError(f"{len(pairs)} {what}; between {low} and {high} are allowed")
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate {what[:-1]} keys")


# The option counts of each form (the contract's; _check_count enforces them, with its messages):
# choice 2-255, score 2-10 levels, set/span 1-255 labels. List keys must be unique.
def _map(low: int, high: int) -> Any:
    return SchemaKeys(minProperties=low, maxProperties=high)


def _list(low: int, high: int) -> Any:
    return SchemaKeys(minItems=low, maxItems=high, description="unique keys")


ChoiceMap = Annotated[dict[str, str], _map(2, 255)]
ChoiceList = Annotated[list[KeyedOption], _list(2, 255)]
NoulMap = Annotated[
    dict[Literal["false", "true"], str],
    WithJsonSchema(
        {
            "type": "object",
            "properties": {"false": {"type": "string"}, "true": {"type": "string"}},
            "additionalProperties": False,
        }
    ),
]
NoulList = Annotated[list[KeyedOption], DocumentedAs(list[NoulOption]), _list(0, 2)]
Levels = Annotated[list[str], SchemaKeys(minItems=2, maxItems=10)]
LabelMap = Annotated[dict[str, str], _map(1, 255)]
LabelList = Annotated[list[KeyedOption], _list(1, 255)]


class ChoiceQuestion(_Question):
    model_config = ConfigDict(json_schema_extra=exactly_one("criteria", "choices"))

    type: Literal["choice"]
    criteria: ChoiceMap | Absent = ABSENT
    choices: ChoiceList | Absent = ABSENT

    @model_validator(mode="after")
    def _check(self) -> ChoiceQuestion:
        _one_form(self.criteria, self.choices, ("criteria", "choices"))
        _check_count(self.options(), 2, 255, "options")
        return self

    def options(self) -> list[tuple[str, str]]:
        return _keyed(self.criteria, self.choices)


class NoulQuestion(_Question):
    # With no option, the instructions are the statement (app/srun/decisions.py). "criteria or
    # choices, not both" stays in words: schemathesis cannot generate from a nested `not`.
    model_config = ConfigDict(
        json_schema_extra={
            "description": "a statement to judge: instructions, or criteria or choices (not both)",
            "anyOf": [
                {
                    "required": ["instructions"],
                    "properties": {"instructions": {"type": "string", "minLength": 1}},
                },
                {"required": ["criteria"], "properties": {"criteria": {"minProperties": 1}}},
                {"required": ["choices"], "properties": {"choices": {"minItems": 1}}},
            ],
        }
    )

    type: Literal["noul"]
    criteria: NoulMap | Absent = ABSENT
    choices: NoulList | Absent = ABSENT

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
    model_config = ConfigDict(json_schema_extra=exactly_one("criteria", "levels"))

    type: Literal["score"]
    criteria: Levels | Absent = ABSENT
    levels: Levels | Absent = ABSENT

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

    model_config = ConfigDict(json_schema_extra=exactly_one("criteria", "labels"))

    criteria: LabelMap | Absent = ABSENT
    labels: LabelList | Absent = ABSENT

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
    if not isinstance(qtype, str) or qtype not in _BY_TYPE:  # (a dict or list is no type name)
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


# Each question is validated alone later (an invalid one is answered with invalid_question);
# the schema says what a valid one is. A request needs one valid question somewhere.
Questions = Annotated[
    dict[str, Any], DocumentedAs(dict[str, Question]), Field(description="question id -> question")
]


class NestedState(_Strict):
    state: str = ""
    questions: Questions = Field(default_factory=dict)


DataUrls = Annotated[
    list[Annotated[str, Field(json_schema_extra={"pattern": "^data:"})]],
    Field(description="base64 data URLs; only for a model whose card lists the modality (else 400)"),
]


class DecisionRequest(_Strict):
    # At least one question, at the root or (each) under states; at most 1024 in all.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["questions"], "properties": {"questions": {"minProperties": 1}}},
                {
                    "required": ["states"],
                    "properties": {
                        "states": {
                            "minProperties": 1,
                            "additionalProperties": {
                                "required": ["questions"],
                                "properties": {"questions": {"minProperties": 1}},
                            },
                        }
                    },
                },
            ]
        }
    )

    model: str | Absent = ABSENT
    state: str = ""
    questions: Questions = Field(default_factory=dict)
    states: Annotated[dict[str, NestedState], Field(max_length=64)] | Absent = ABSENT
    images: DataUrls | Absent = ABSENT
    videos: DataUrls | Absent = ABSENT
    options: DecisionOptions = Field(default_factory=DecisionOptions)

    @model_validator(mode="after")
    def _check(self) -> DecisionRequest:
        total = len(self.questions) + sum(len(s.questions) for s in (self.states or {}).values())
        if total > 1024:
            raise ValueError(f"{total} questions; at most 1024 per request")
        return self  # (at most 64 states: the field's own constraint)


# --------------------------------------------------------------------------- answers


class _Wire(BaseModel):
    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class ChoiceAnswer(_Wire):
    type: Literal["choice"] = "choice"
    choice: str | None = Field(
        default=None, description="the most probable option; absent below the question's threshold"
    )
    confidence: float
    probabilities: dict[str, float]
    abstain_probability: float


class NoulAnswer(_Wire):
    type: Literal["noul"] = "noul"
    noul: float = Field(ge=0.0, le=1.0, description="probability that the statement is true")


class ScoreAnswer(_Wire):
    type: Literal["score"] = "score"
    score: float | None = Field(
        default=None, description="expected level index (0-based); absent below the threshold"
    )
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
