"""Wire shapes of the classification diagnostics (spec 01 "Older classification shapes").

Served under /api/v1/diagnostics/classify/* (current) and /api/v1/classify/* (older
contract). Options objects ignore unknown keys, as the reference router's JSON decoding
does; the fields that matter are validated (types, ranges) and a violation is a 400
INVALID_INPUT in the management error body `{error: {code, message, timestamp}}`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Options(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- requests


class IntentOptions(_Options):
    return_probabilities: bool = False
    confidence_threshold: float | None = Field(default=None, ge=0, le=1)
    include_explanation: bool = False


class PIIOptions(_Options):
    entity_types: list[str] | None = None
    confidence_threshold: float | None = Field(default=None, ge=0, le=1)
    return_positions: bool = True
    mask_entities: bool = True


Sensitivity = Literal["low", "medium", "high"]


class SecurityOptions(_Options):
    """`sensitivity`: low | medium | high (thresholds 0.7 / 0.5 / 0.3) or a threshold in [0, 1].
    `method` (svc-sr extension): classifier | contrastive | hybrid."""

    detection_types: list[str] | None = None
    sensitivity: Sensitivity | Annotated[float, Field(ge=0, le=1)] | None = None
    include_reasoning: bool = False
    method: Literal["classifier", "contrastive", "hybrid"] | None = None

    def threshold(self) -> float | None:
        if isinstance(self.sensitivity, str):
            return {"low": 0.7, "medium": 0.5, "high": 0.3}[self.sensitivity]
        return None if self.sensitivity is None else float(self.sensitivity)


class IntentRequest(_Request):
    text: str
    options: IntentOptions = Field(default_factory=IntentOptions)
    recipe: str | None = None  # accepted for the current contract; svc-sr serves one recipe


class PIIRequest(_Request):
    text: str
    options: PIIOptions = Field(default_factory=PIIOptions)
    recipe: str | None = None


class SecurityRequest(_Request):
    text: str
    options: SecurityOptions = Field(default_factory=SecurityOptions)
    recipe: str | None = None


class CombinedOptions(_Options):
    intent: IntentOptions = Field(default_factory=IntentOptions)
    pii: PIIOptions = Field(default_factory=PIIOptions)
    security: SecurityOptions = Field(default_factory=SecurityOptions)


class CombinedRequest(_Request):
    text: str
    options: CombinedOptions = Field(default_factory=CombinedOptions)
    recipe: str | None = None


class BatchRequest(_Request):
    texts: list[str]
    task_type: Literal["intent", "pii", "security"] = "intent"
    # Options of the selected task (intent's by default); validated against that task's model.
    options: dict[str, Any] = Field(default_factory=dict)
    recipe: str | None = None


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


class ManagementErrorDetail(BaseModel):
    code: str
    message: str
    timestamp: str  # ISO 8601, UTC


class ManagementErrorBody(BaseModel):
    error: ManagementErrorDetail
