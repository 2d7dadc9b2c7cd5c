"""The `routing:` section: decisions (rule trees, model references, plugins) over the signals."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from app.config.model_base import Strict
from app.config.reliability import FallbackConfig, ReliabilityConfig
from app.config.selection import Algorithm
from app.config.signals import Signals


class Condition(Strict):
    """A rule node: a leaf `{type, name}` or a subtree `{operator, conditions}`."""

    type: str | None = None
    name: str | None = None
    operator: Literal["AND", "OR", "NOT"] | None = None
    conditions: list[Condition] = Field(default_factory=list)
    label: str | None = None
    on_error: Literal["match", "no_match"] | None = None

    @field_validator("operator", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _leaf_or_tree(self) -> Condition:
        is_leaf = self.type is not None or self.name is not None
        is_tree = self.operator is not None
        if is_leaf and is_tree:
            raise ValueError("a condition is either a leaf {type, name} or a tree {operator, conditions}")
        if is_leaf and not (self.type and self.name):
            raise ValueError("a leaf condition needs both `type` and `name`")
        if is_tree and self.operator == "NOT" and len(self.conditions) != 1:
            raise ValueError("NOT takes exactly one condition")
        if is_tree and not self.conditions:
            raise ValueError(f"{self.operator} needs at least one condition")
        return self

    @property
    def is_leaf(self) -> bool:
        return self.type is not None


class ModelRef(Strict):
    model: str
    use_reasoning: bool | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    reasoning_description: str | None = None
    lora_name: str | None = None
    weight: float | None = Field(default=None, ge=0)


PLUGIN_TYPES = frozenset(
    {
        "system_prompt",
        "header_mutation",
        "fast_response",
        "semantic-cache",
        "response_cache",
        "pii",
        "jailbreak",
        "router_replay",
        "request_params",
        "tools",
        "tool_selection",
        "context_compression",
        "memory",
        "response_jailbreak",
        "hallucination",
        "rag",
    }
)
REFERENCE_ONLY_PLUGIN_TYPES = frozenset(
    {
        "image_gen",
        "shadow_dispatch",
    }
)


class Plugin(Strict):
    type: str
    configuration: dict[str, Any] = Field(default_factory=dict)
    enabled: bool | None = None


class Decision(Strict):
    name: str = Field(min_length=1)
    description: str | None = None
    priority: int = 0
    tier: int = Field(default=0, ge=0)
    rules: Condition | None = None
    modelRefs: list[ModelRef] = Field(default_factory=list)
    preferred_endpoints: list[str] = Field(default_factory=list)
    plugins: list[Plugin] = Field(default_factory=list)
    algorithm: Algorithm = Field(default_factory=Algorithm)
    reliability: ReliabilityConfig | None = None
    fallback: FallbackConfig | None = None


class Routing(Strict):
    strategy: Literal["priority", "confidence"] = "priority"
    modelCards: list[dict[str, Any]] = Field(default_factory=list)
    signals: Signals = Field(default_factory=Signals)
    projections: dict[str, Any] = Field(default_factory=dict)
    decisions: list[Decision] = Field(default_factory=list)


Condition.model_rebuild()
