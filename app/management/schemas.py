"""Wire shapes of the management API (request and response bodies)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.common.api_docs import MAX_SEQUENCE, NON_BLANK, Absent, no_default
from app.exchange.openai_schemas import ChatCompletionRequest


class ReasonOut(BaseModel):
    stage: Literal["parse", "compile", "validate", "warm", "activate"]
    code: str
    message: str
    path: str | None = None


class ActivationView(BaseModel):
    attempt: int
    version: str
    document_hash: str
    state: Literal["pending", "active", "failed", "superseded"]
    stage: str | None = None
    started_at: str
    finished_at: str | None = None
    reasons: list[ReasonOut] = Field(default_factory=list)


class HashView(BaseModel):
    source_config_hash: str
    generated_runtime_hash: str
    active_runtime_hash: str | None
    activation_status: Literal["active", "pending", "failed", "unknown"]
    config_version: int | None
    active_version: str | None = None
    activation: ActivationView | None = None
    last_rejection: dict[str, Any] | None = None


class MutationResponse(BaseModel):
    status: Literal["active", "pending", "activation_failed", "superseded"]
    source_config_hash: str
    generated_runtime_hash: str
    active_runtime_hash: str | None
    activation_status: Literal["active", "pending", "failed", "unknown"]
    config_version: int | None
    version: str = Field(description="version id of the persisted document")
    etag: str
    activation: ActivationView | None = None
    warnings: list[str] = Field(default_factory=list)
    rollback_of: str | None = None
    error: dict[str, Any] | None = Field(default=None, description="set with status activation_failed")


class VersionEntry(BaseModel):
    version: str
    timestamp: str
    source: str
    filename: str
    config_version: int | None
    hash: str
    active: bool
    result: str
    rollback_of: str | None = None


class VersionsResponse(BaseModel):
    versions: list[VersionEntry]
    total: int
    history_limit: int


class ValidateResponse(BaseModel):
    valid: bool
    source_config_hash: str | None = None
    generated_runtime_hash: str | None = None
    document: dict[str, Any] | None = Field(default=None, description="normalized (compact canonical v0.3)")
    warnings: list[str] = Field(default_factory=list)
    reasons: list[ReasonOut] = Field(default_factory=list)
    restart_required: bool = False


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["merge", "replace"] = "replace"
    document: dict[str, Any]


class Change(BaseModel):
    op: Literal["add", "remove", "replace"]
    path: str
    before: Any = None
    after: Any = None


class PlanResponse(BaseModel):
    mode: Literal["merge", "replace"]
    valid: bool
    current_etag: str
    candidate_etag: str | None
    changed: bool
    changes: list[Change] = Field(default_factory=list)
    restart_required: bool = False
    reasons: list[ReasonOut] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class RollbackRequest(BaseModel):
    # Exactly one of the two, neither null (the schema says so; the validator enforces it).
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"oneOf": [{"required": ["version"]}, {"required": ["config_version"]}]},
    )

    version: int | str | Absent = Field(
        default=None,
        description="version id/timestamp, or a config_version number",
        json_schema_extra=no_default,
    )
    config_version: Annotated[int, Field(ge=1)] | Absent = Field(default=None, json_schema_extra=no_default)

    @model_validator(mode="after")
    def _one(self) -> RollbackRequest:
        if (self.version is None) == (self.config_version is None):
            raise ValueError("give exactly one of `version` or `config_version`")
        return self


class Condition(BaseModel):
    type: Literal[
        "Live",
        "StartupComplete",
        "ActiveConfigAvailable",
        "ConfigConverged",
        "Ready",
        "ManagementStoreAvailable",
        "BackendsReachable",
    ]
    status: Literal["True", "False", "Unknown"]
    reason: str
    # Only where the reason alone does not say what to fix (the unreachable backends' names).
    message: str | None = None


class StatusDocument(BaseModel):
    schema_version: Literal["v1"] = "v1"
    instance_id: str
    observed_at: str
    conditions: list[Condition]


class RouteInfo(BaseModel):
    method: str
    path: str
    permission: str | None
    sensitivity: Literal["public", "internal", "sensitive", "secret"]
    summary: str | None = None
    deprecated: bool = False
    authenticated: bool = Field(description="needs a bearer token when auth mode is bearer")


class Discovery(BaseModel):
    api_version: Literal["v1"] = "v1"
    auth_mode: Literal["none", "bearer"]
    permissions: dict[str, str]
    routes: list[RouteInfo]


class PreviewContext(BaseModel):
    model_config = ConfigDict(extra="allow")

    session_id: str | None = None
    seed: int | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class PreviewRequest(ChatCompletionRequest):
    """A chat-completion request to route (model defaults to MoM), plus preview_context."""

    model: str = Field(default="MoM", min_length=1, pattern=NON_BLANK)
    preview_context: PreviewContext | None = None


class PreviewResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    selection_status: str
    selection_method: str | None
    selection_provenance: str | None = "preview"
    selected_model: str | None = None
    decision: str | None = None
    signals: list[dict[str, Any]] = Field(default_factory=list)
    backend_calls: int = 0
    persisted: bool = False


class AuditQuery(BaseModel):
    action: str | None = None
    limit: int = Field(default=100, ge=1, le=1000)
    after_sequence: int = Field(default=0, ge=0, le=MAX_SEQUENCE)
