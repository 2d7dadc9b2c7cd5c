"""Signal rules of the families judged on the request itself or the router's sentence vector:
`preference`, `complexity`, `language` and `modality` (the reference router's key names).

- preferences[]: {name, description, examples[], threshold}: Arch-Router style routing by a
  user-written description of each route; the best-scoring rule at or above its threshold wins.
- complexity[]: {name, description, threshold, hard{candidates[]}, easy{candidates[]},
  prototype_scoring{aggregation}}: a condition names `<rule>:hard|medium|easy`.
- language[]: {name (ISO 639-1 code), threshold}.
- modality[]: {name (text|image|audio|code|image_generation), description}.
- fact_check[]: {name (needs_fact_check|no_fact_check_needed), description, threshold}.
- user_feedbacks[]: {name (satisfied|need_clarification|wrong_answer|want_different), description}.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from app.config.model_base import Strict

COMPLEXITY_LEVELS: tuple[str, ...] = ("hard", "medium", "easy")
Modality = Literal["text", "image", "audio", "code", "image_generation"]
MODALITIES: tuple[str, ...] = get_args(Modality)


class PreferenceSignal(Strict):
    name: str
    description: str = Field(min_length=1)
    examples: list[str] = Field(default_factory=list)
    # MiniLM puts a request and a route's abstract description at cosine 0.1-0.5; examples lift it.
    threshold: float = Field(default=0.25, ge=0, le=1)


class Prototypes(Strict):
    candidates: list[str] = Field(min_length=1)


class PrototypeScoring(Strict):
    """How a side's similarity is read from its candidates: the best one, or their mean."""

    aggregation: Literal["max", "mean"] = "max"


class ComplexitySignal(Strict):
    """score = similarity to `hard` - similarity to `easy` (each side aggregated over its
    candidates); hard when score > hard_above, easy when score < easy_below, else medium.
    `threshold` t sets the symmetric pair (t, -t); an explicit pair wins."""

    name: str
    description: str | None = None
    threshold: float = Field(default=0.05, ge=0, le=1)
    hard_above: float | None = Field(default=None, ge=-1, le=1)
    easy_below: float | None = Field(default=None, ge=-1, le=1)
    hard: Prototypes
    easy: Prototypes
    prototype_scoring: PrototypeScoring = Field(default_factory=PrototypeScoring)
    composer: dict[str, Any] | None = None  # the reference's composed scores: kept, not evaluated

    @field_validator("threshold", mode="before")
    @classmethod
    def _number_string(cls, value: Any) -> Any:
        return float(value) if isinstance(value, str) and value.strip() else value

    @model_validator(mode="before")
    @classmethod
    def _remote_pairs(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("hard_below" in data or "easy_above" in data):
            raise ValueError(
                "hard_below/easy_above need a remote score backend (complexity_model), which "
                "svc-sr does not run; use threshold or hard_above/easy_below"
            )
        return data

    @model_validator(mode="after")
    def _ordered(self) -> ComplexitySignal:
        if (self.hard_above is None) != (self.easy_below is None):
            raise ValueError("hard_above and easy_below go together")
        if self.hard_above is not None and self.easy_below is not None and self.easy_below > self.hard_above:
            raise ValueError("easy_below must not exceed hard_above")
        return self

    def cut_points(self) -> tuple[float, float]:
        """(hard_above, easy_below)."""
        if self.hard_above is not None and self.easy_below is not None:
            return self.hard_above, self.easy_below
        return self.threshold, -self.threshold


class LanguageSignal(Strict):
    name: str = Field(min_length=2, max_length=3)
    threshold: float = Field(default=0.5, ge=0, le=1)

    @field_validator("name")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class ModalitySignal(Strict):
    name: Modality
    description: str | None = None


class FactCheckSignal(Strict):
    """Matches when the fact-check head's probability of `name` reaches `threshold`."""

    name: Literal["needs_fact_check", "no_fact_check_needed"]
    description: str | None = None
    threshold: float = Field(default=0.5, ge=0, le=1)


class UserFeedbackSignal(Strict):
    name: Literal["satisfied", "need_clarification", "wrong_answer", "want_different"]
    description: str | None = None


def condition_names(kind: str, rules: Iterable[Any]) -> set[str]:
    """The names a decision condition of `kind` may use for these rules."""
    names = {rule.name for rule in rules}
    if kind == "complexity":
        return {f"{name}:{level}" for name in names for level in COMPLEXITY_LEVELS}
    return names
