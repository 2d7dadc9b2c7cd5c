"""Worker wire shapes beyond `app.runtime.schemas` (which covers classify and embeddings):
model cards of every surface, rerank, bundle, health, the model list, error bodies with a
`reason`, and the models file (docs/model-runtime.md, "The worker")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.runtime.schemas import ArtifactRef, CardLimits, InvalidRequest

API_VERSION = "1.0.0"
WorkerSurface = Literal["decisions", "classify", "embeddings", "rerank"]
HealthStatus = Literal["starting", "loading", "warming", "ready", "degraded", "failed"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Wire(BaseModel):
    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


# --------------------------------------------------------------------------- errors


class WorkerErrorDetail(_Wire):
    code: str
    message: str
    reason: str | None = None
    limit: int | None = None


class WorkerErrorBody(_Wire):
    error: WorkerErrorDetail


class RejectedInput(InvalidRequest):
    """400 invalid_request with a machine-readable reason (and the limit broken, if any)."""

    def __init__(self, message: str, reason: str, limit: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.limit = limit

    def __reduce__(self) -> tuple[type[RejectedInput], tuple[str, str, int | None]]:
        return (type(self), (self.message, self.reason, self.limit))


# --------------------------------------------------------------------------- cards


class WorkerCard(_Wire):
    """A served model: what it is, the surfaces it answers, labels, limits and state."""

    name: str
    description: str
    task: str
    surfaces: list[str]
    labels: list[str] = Field(default_factory=list)
    modalities: list[str] = Field(default_factory=lambda: ["text"])
    engines: list[str] = Field(default_factory=list)
    engine: str | None = None
    dimensions: list[int] = Field(default_factory=list)
    layers: list[int] = Field(default_factory=list)
    representation: str | None = None
    revision: str | None = None
    digest: str | None = None
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    limits: CardLimits
    device: str = "cpu"
    profile: str = "exact"
    status: str = "available"
    status_message: str | None = None
    served_name: str | None = None
    licence: str | None = None  # SPDX id of the model's licence


class ProcessLimits(_Wire):
    max_bundle_tasks: int
    max_request_bytes: int
    max_queue: int
    max_queued_tokens: int
    max_batch_tokens: int


class ModelsResponse(_Wire):
    object: Literal["list"] = "list"
    api_version: str = API_VERSION
    data: list[WorkerCard]
    process_limits: ProcessLimits
    accepted_licences: list[str] = Field(default_factory=list)  # --accept-licence ids


class ModelHealth(_Wire):
    status: str
    message: str | None = None
    attempts: int = 0


class HealthResponse(_Wire):
    status: HealthStatus
    api_version: str = API_VERSION
    models: dict[str, ModelHealth] = Field(default_factory=dict)


class LiveResponse(_Wire):
    status: Literal["alive"] = "alive"
    api_version: str = API_VERSION


# --------------------------------------------------------------------------- rerank


class RerankDocument(_Strict):
    text: str


class RerankRequest(_Strict):
    model: str | None = None
    query: str = Field(max_length=100_000)
    documents: list[str | RerankDocument] = Field(min_length=1, max_length=1000)
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False


class RerankItem(_Wire):
    index: int
    relevance_score: float
    similarity: float | None = None  # the built-in reranker's parts: cosine ...
    bm25: float | None = None  # ... and BM25
    logit: float | None = None  # a cross-encoder's raw score (relevance_score is its sigmoid)
    document: str | None = None


class RerankUsage(_Wire):
    tokens: int = 0
    tokens_lower_bound: bool | None = None


class RerankResponse(_Wire):
    object: Literal["rerank"] = "rerank"
    model: str
    results: list[RerankItem]
    usage: RerankUsage


# --------------------------------------------------------------------------- bundle


class BundleTask(_Strict):
    id: str = Field(min_length=1, max_length=256)
    classify: dict[str, Any] | None = None
    decisions: dict[str, Any] | None = None
    embeddings: dict[str, Any] | None = None
    rerank: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one(self) -> BundleTask:
        given = [k for k in ("classify", "decisions", "embeddings", "rerank") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a task holds exactly one of classify, decisions, embeddings or rerank")
        return self

    @property
    def surface(self) -> str:
        return next(
            k for k in ("classify", "decisions", "embeddings", "rerank") if getattr(self, k) is not None
        )

    @property
    def body(self) -> dict[str, Any]:
        return getattr(self, self.surface)


class BundleOptions(_Strict):
    deadline_ms: int | None = Field(default=None, ge=1, le=600_000)


class BundleRequest(_Strict):
    tasks: list[BundleTask] = Field(min_length=1)
    options: BundleOptions = Field(default_factory=BundleOptions)

    @model_validator(mode="after")
    def _unique(self) -> BundleRequest:
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique")
        return self


class BundleResult(_Wire):
    id: str
    surface: str
    status: int
    body: dict[str, Any] | None = None
    error: WorkerErrorDetail | None = None


class BundleResponse(_Wire):
    object: Literal["bundle"] = "bundle"
    results: list[BundleResult]


# --------------------------------------------------------------------------- models file


class ModelEntry(_Strict):
    model: str = Field(min_length=1)
    revision: str | None = None
    name: str | None = None
    device: str | None = None
    profile: str | None = None
    engine: Literal["auto", "native", "onnxruntime"] | None = None
    family: str | None = None
    memory_budget_gib: float | None = Field(default=None, gt=0)
    options: dict[str, Any] = Field(default_factory=dict)


class ModelsFile(_Strict):
    models: list[ModelEntry] = Field(min_length=1)
