"""Wire shapes of the classification diagnostics (spec 01 "Older classification shapes").

Served under /api/v1/diagnostics/classify/* (current) and /api/v1/classify/* (older
contract). Options objects ignore unknown keys, as the reference router's JSON decoding
does; the fields that matter are validated (types, ranges, the text's length) here, so the
served OpenAPI document states exactly what the handlers enforce. A violation is a 400
INVALID_INPUT (TEXT_TOO_LONG for a text over the limit) in the management error body
`{error: {code, message, timestamp}}` (`diagnostics_requests.parse`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, RootModel, Tag

from app.common.api_docs import NON_BLANK
from app.models.pii import PII_ENTITY_TYPES

MAX_TEXT_CHARS = 100_000  # the PII detector's own input limit (TEXT_TOO_LONG past it)
DEFAULT_MAX_BATCH = 100  # global.services.api.batch_classification.max_batch_size when unset

# Not blank and at most MAX_TEXT_CHARS characters.
Text = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        pattern=NON_BLANK,
        description=f"non-blank; over {MAX_TEXT_CHARS} characters is 400 TEXT_TOO_LONG",
    ),
]
Threshold = Annotated[float, Field(ge=0, le=1)]
# Matched case-insensitively; the schema names the canonical spelling.
EntityType = Annotated[str, Field(json_schema_extra={"enum": list(PII_ENTITY_TYPES)})]


class _Options(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- requests


class IntentOptions(_Options):
    return_probabilities: bool = False
    confidence_threshold: Threshold | None = None
    include_explanation: bool = False


class PIIOptions(_Options):
    entity_types: list[EntityType] | None = Field(
        default=None, description="PII entity types to report (case-insensitive); unknown names are a 400"
    )
    confidence_threshold: Threshold | None = None
    return_positions: bool = True
    mask_entities: bool = True


Sensitivity = Literal["low", "medium", "high"]


class SecurityOptions(_Options):
    """`sensitivity`: low | medium | high (thresholds 0.7 / 0.5 / 0.3) or a threshold in [0, 1].
    `method` (svc-sr extension): classifier | contrastive | hybrid."""

    detection_types: list[str] | None = None
    sensitivity: Sensitivity | Threshold | None = None
    include_reasoning: bool = False
    method: Literal["classifier", "contrastive", "hybrid"] | None = None

    def threshold(self) -> float | None:
        if isinstance(self.sensitivity, str):
            return {"low": 0.7, "medium": 0.5, "high": 0.3}[self.sensitivity]
        return None if self.sensitivity is None else float(self.sensitivity)


class IntentRequest(_Request):
    text: Text
    options: IntentOptions = Field(default_factory=IntentOptions)
    recipe: str | None = None  # accepted for the current contract; svc-sr serves one recipe


class PIIRequest(_Request):
    text: Text
    options: PIIOptions = Field(default_factory=PIIOptions)
    recipe: str | None = None


class SecurityRequest(_Request):
    text: Text
    options: SecurityOptions = Field(default_factory=SecurityOptions)
    recipe: str | None = None


class CombinedOptions(_Options):
    intent: IntentOptions = Field(default_factory=IntentOptions)
    pii: PIIOptions = Field(default_factory=PIIOptions)
    security: SecurityOptions = Field(default_factory=SecurityOptions)


class CombinedRequest(_Request):
    text: Text
    options: CombinedOptions = Field(default_factory=CombinedOptions)
    recipe: str | None = None


class _Batch(_Request):
    texts: list[Text] = Field(
        min_length=1,
        description=(
            "at most global.services.api.batch_classification.max_batch_size texts "
            f"({DEFAULT_MAX_BATCH} when unset)"
        ),
    )
    recipe: str | None = None


class IntentBatch(_Batch):
    task_type: Literal["intent"] = "intent"
    options: IntentOptions = Field(default_factory=IntentOptions)


class PIIBatch(_Batch):
    task_type: Literal["pii"]
    options: PIIOptions = Field(default_factory=PIIOptions)


class SecurityBatch(_Batch):
    task_type: Literal["security"]
    options: SecurityOptions = Field(default_factory=SecurityOptions)


def _task_type(value: Any) -> Any:
    """The variant a body selects (a body that is no object fails as an intent batch)."""
    if isinstance(value, dict):
        return value.get("task_type", "intent")
    return getattr(value, "task_type", "intent")


BatchVariant = Annotated[
    Annotated[IntentBatch, Tag("intent")]
    | Annotated[PIIBatch, Tag("pii")]
    | Annotated[SecurityBatch, Tag("security")],
    Discriminator(
        _task_type,
        custom_error_type="invalid_task_type",
        custom_error_message="task_type: must be one of intent, pii or security",
    ),
]


class BatchRequest(RootModel[BatchVariant]):
    """One batch: its options are those of the selected task (task_type, intent by default)."""


# ---------------------------------------------------------------- responses


class IntentClassification(BaseModel):
    category: str
    confidence: float
    processing_time_ms: float


class IntentResponse(BaseModel):
    classification: IntentClassification
    probabilities: dict[str, float] | None = None
    recommended_model: str | None = None
    routing_decision: str | None = None
    explanation: str | None = None  # with options.include_explanation


class PIIEntityOut(BaseModel):
    type: str
    value: str
    confidence: float
    start_position: int | None = None
    end_position: int | None = None
    masked_value: str | None = None


class PIIResponse(BaseModel):
    has_pii: bool
    entities: list[PIIEntityOut]
    masked_text: str | None = None
    security_recommendation: Literal["allow", "block"]
    processing_time_ms: float


class SecurityResponse(BaseModel):
    is_jailbreak: bool
    risk_score: float
    detection_types: list[str]
    confidence: float
    recommendation: Literal["allow", "block"]
    reasoning: str | None = None
    patterns_detected: list[str]
    processing_time_ms: float


class CombinedResponse(BaseModel):
    intent: IntentResponse
    pii: PIIResponse
    security: SecurityResponse
    processing_time_ms: float


class IntentBatchItem(BaseModel):
    category: str
    confidence: float
    processing_time_ms: float
    probabilities: dict[str, float] | None = None


class BatchStatistics(BaseModel):
    category_distribution: dict[str, int]
    avg_confidence: float
    low_confidence_count: int


class BatchResponse(BaseModel):
    results: list[IntentBatchItem | PIIResponse | SecurityResponse]
    total_count: int
    processing_time_ms: float
    statistics: BatchStatistics
