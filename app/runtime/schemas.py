"""Wire shapes of the model runtime (/v1/classify, /v1/embeddings, /v1/models; docs/model-runtime.md) and
its error model. Both hosts (Ray Serve deployments, the `svc-srun` HTTP worker) speak these.

Conventions:
- Span offsets count Unicode code points (Python ``str`` indices), end exclusive.
- ``usage.tokens`` counts the input tokens the model read, special tokens included once per
  input; a windowed input counts each of its tokens once although overlaps are read twice.
  An input read only in part (overflow ``truncate``) makes it a lower bound and adds
  ``tokens_lower_bound: true``. Items that failed count 0.
- Serialise with ``to_wire()`` (drops unset optional fields such as ``tokens_lower_bound``
  when false, ``meta`` when not asked for).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

# `rerank`: a cross-encoder directory's relevance logit over (query, passage) pairs, answered
# on svc-srun's /v1/rerank (app/srun/cross_encoder.py), not on classify or embeddings.
Task = Literal["embeddings", "label_probabilities", "label_scores", "token_spans", "rerank"]
Surface = Literal["classify", "embeddings", "rerank"]
Overflow = Literal["reject", "truncate", "window"]
EngineName = Literal["onnxruntime", "native"]
ModelStatus = Literal["available", "unavailable", "loading", "warming", "ready", "degraded", "failed"]

MAX_ITEMS = 2048  # inputs per request; bigger jobs should be split (one request holds one queue slot)

# --------------------------------------------------------------------------- errors


class ItemError(BaseModel):
    """One item's error in a result. A whole request's failure is `RuntimeFailure`, which a
    worker answers with app/srun/schemas.py's `WorkerErrorBody`."""

    code: str
    message: str


class RuntimeFailure(Exception):
    """A whole-request failure with the spec's status and code."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(RuntimeFailure, ValueError):
    status = 400
    code = "invalid_request"


class ModelNotFound(RuntimeFailure, LookupError):
    status = 404
    code = "model_not_found"


class UnsupportedSurface(RuntimeFailure):
    status = 422
    code = "unsupported_surface"


class Overloaded(RuntimeFailure):
    """Queue limits reached; hosts answer 429 with Retry-After: 1."""

    status = 429
    code = "overloaded"


class NotReady(RuntimeFailure):
    status = 503
    code = "not_ready"


class ModelNotLoadedError(RuntimeError):
    """An in-graph model (domain, PII, jailbreak) is not loaded or its deployment unreachable.
    The diagnostics answer 503 MODEL_NOT_LOADED; routing reports a signal error. Not a
    RuntimeFailure: the graph's callers render it, not the worker's HTTP API."""


# Item-level error codes (one input fails, the others are answered).
MAX_LENGTH_EXCEEDED = "max_length_exceeded"
SCAN_BUDGET_EXCEEDED = "scan_budget_exceeded"
INVALID_INPUT = "invalid_input"


# --------------------------------------------------------------------------- requests


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WindowOptions(_Strict):
    """Window size in tokens (special tokens included, capped by max_input_tokens) and the
    tokens consecutive windows share. Defaults: the read budget and 32 tokens."""

    tokens: int | None = Field(default=None, ge=3)
    overlap: int | None = Field(default=None, ge=0)


class ClassifyOptions(_Strict):
    overflow: Overflow = "reject"
    window: WindowOptions | None = None
    max_tokens: int | None = Field(default=None, ge=3, description="capped by the card's max_input_tokens")
    return_meta: bool = False


class EmbeddingsOptions(ClassifyOptions):
    # Sentence-embedding users expect silent truncation (sentence-transformers does it).
    overflow: Overflow = "truncate"


class TextPair(_Strict):
    text: str
    text_pair: str


class QAInput(_Strict):
    context: str
    question: str
    answer: str


ClassifyInput = str | list[str] | list[TextPair] | list[QAInput]


class ClassifyRequest(_Strict):
    model: str | None = Field(default=None, description="required when the process serves several models")
    input: ClassifyInput
    options: ClassifyOptions = Field(default_factory=ClassifyOptions)

    @model_validator(mode="after")
    def _check_size(self) -> ClassifyRequest:
        _check_items(self.input)
        return self


class EmbeddingsRequest(_Strict):
    model: str | None = None
    input: str | list[str]
    dimensions: int | None = Field(default=None, ge=1)
    layer: int | None = None
    encoding_format: Literal["float"] = "float"
    options: EmbeddingsOptions = Field(default_factory=EmbeddingsOptions)

    @model_validator(mode="after")
    def _check_size(self) -> EmbeddingsRequest:
        _check_items(self.input)
        return self


def _check_items(value: Any) -> None:
    if isinstance(value, list):
        if not value:
            raise ValueError("input must not be an empty list")
        if len(value) > MAX_ITEMS:
            raise ValueError(f"input has {len(value)} items; at most {MAX_ITEMS} per request")


M = TypeVar("M", bound=BaseModel)


def parse_request(model: type[M], body: Any) -> M:
    """Validate a request body; any problem becomes InvalidRequest naming the field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidRequest(f"{where}: {first['msg']}") from None


# --------------------------------------------------------------------------- responses


class _Wire(BaseModel):
    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class Usage(_Wire):
    tokens: int = 0
    tokens_lower_bound: bool | None = None  # present (true) only when an input was read in part


class Span(_Wire):
    label: str
    start: int = Field(ge=0, description="Unicode code point offset, inclusive")
    end: int = Field(ge=0, description="Unicode code point offset, exclusive")
    text: str
    probability: float = Field(ge=0.0, le=1.0)


class Timings(_Wire):
    """Engine phases in ms (Server-Timing: tokenize, queue, forward, post)."""

    tokenize_ms: float = 0.0
    queue_ms: float = 0.0  # set by batching hosts
    forward_ms: float = 0.0
    post_ms: float = 0.0
    windows: int = 0  # forward rows (segments) this request needed


class ResultMeta(_Wire):
    """Returned with ``options.return_meta``."""

    revision: str
    digest: str
    profile: str = "exact"
    engine: str
    device: str
    representation: str | None = None  # embeddings: identifies the vector space
    timings: Timings


class ItemResult(_Wire):
    """One input's answer: exactly one of probabilities (+label, confidence), scores, spans
    or error is set, per the model's task."""

    index: int
    label: str | None = None
    confidence: float | None = None
    probabilities: dict[str, float] | None = None
    scores: dict[str, float] | None = None
    spans: list[Span] | None = None
    error: ItemError | None = None
    usage: Usage = Field(default_factory=Usage)


class ClassifyResult(_Wire):
    model: str
    task: Task
    results: list[ItemResult]
    usage: Usage
    meta: ResultMeta | None = None
    _timings: Timings = PrivateAttr(default_factory=Timings)

    @property
    def timings(self) -> Timings:
        """Engine phases, always measured (hosts put them in Server-Timing)."""
        return self._timings


class EmbeddingItem(_Wire):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | None = None
    error: ItemError | None = None
    usage: Usage = Field(default_factory=Usage)


class EmbeddingsUsage(_Wire):
    prompt_tokens: int = 0
    total_tokens: int = 0
    tokens_lower_bound: bool | None = None


class EmbeddingsResult(_Wire):
    object: Literal["list"] = "list"
    model: str
    data: list[EmbeddingItem]
    usage: EmbeddingsUsage
    meta: ResultMeta | None = None
    _timings: Timings = PrivateAttr(default_factory=Timings)
    _vectors: Any = PrivateAttr(default=None)

    @property
    def timings(self) -> Timings:
        return self._timings

    @property
    def vectors(self) -> Any:
        """The embeddings as one float32 ndarray (n, dim) for in-process callers; rows of
        failed items are zeros. None when the result was parsed from the wire."""
        return self._vectors


# --------------------------------------------------------------------------- model cards


class CardLimits(_Wire):
    max_input_tokens: int = Field(description="tokens one forward reads, special tokens included")
    max_scan_tokens: int = Field(description="most tokens of one input read under overflow window")
    truncate_tokens: int = Field(description="tokens read under overflow truncate")
    max_chars_per_token: int = Field(description="most characters one token covers (reject pre-check)")


class ArtifactRef(_Wire):
    name: str
    version: str | None = None
    sha256: str | None = None


class ModelCard(_Wire):
    name: str
    description: str
    task: Task
    surfaces: list[Surface]
    labels: list[str] = Field(default_factory=list)
    engines: list[EngineName]
    engine: EngineName | None = None  # the engine loaded (None in the catalogue)
    dimensions: list[int] = Field(default_factory=list)  # embeddings sizes honoured
    layers: list[int] = Field(default_factory=list)  # embeddings layers honoured
    representation: str | None = None
    revision: str | None = Field(default=None, description="pinned packages and artifact versions")
    digest: str | None = Field(default=None, description="sha256 over the artifact files, at load")
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    limits: CardLimits
    device: str = "cpu"
    status: ModelStatus = "available"
    status_message: str | None = None
