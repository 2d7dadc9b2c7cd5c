"""What the Router hands to a front door (Ingress or ext_proc bridge) and gets back.

`route()` returns a RoutePlan; the front door forwards `body` + `upstream_headers` to
the `candidates` in order (or answers `immediate` without any upstream call), relays
the answer with `response_headers`, then calls `complete()` with what came back.
Both front doors use exactly these shapes, so they cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.config.pricing import Pricing
from app.config.reliability import FallbackConfig, ReliabilityConfig
from app.pipeline.answers.schemas import AnswerChecks
from app.pipeline.memory.store import MemoryScope, RecoveryMark
from app.pipeline.pii_mask import PIIMask
from app.upstream.targets import UpstreamTarget


class SignalMatch(BaseModel):
    """Result of one named signal rule, e.g. type=keyword name=urgent."""

    type: str
    name: str
    matched: bool
    confidence: float = 1.0
    detail: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    # the parts of the request the rule read (`ask` or `conversation`, then `tools`, `system`)
    # and a digest of that text (app/common/chat_text.py `read_digest`); None: it read no text
    read: list[str] | None = None
    read_digest: str | None = None


class SignalReport(BaseModel):
    matches: list[SignalMatch] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)  # per signal family
    errors: list[str] = Field(default_factory=list)

    def matched(self, type_: str) -> list[str]:
        return [m.name for m in self.matches if m.type == type_ and m.matched]


class SecurityChecks(BaseModel):
    pii_detected: bool = False
    jailbreak_detected: bool = False
    pii_entities: list[str] = Field(default_factory=list)
    unscanned: list[str] = Field(default_factory=list)  # safety families whose input was not scanned

    def header(self) -> str:
        return f"pii:{str(self.pii_detected).lower()},jailbreak:{str(self.jailbreak_detected).lower()}"


class Refusal(BaseModel):
    """Which check refused a request and why (docs/security.md "Auditable refusals"): in the 403
    body's `details`, the `x-vsr-guard-*` headers and the replay record. `check` is
    `<family>:<rule>` (e.g. `jailbreak:global:prompt_guard`, `pii:plugin:<decision>`), the name
    an operator's outcome and `svc-sr optimize recipe-learning` use."""

    check: str
    code: str  # the 403's error code: jailbreak_detected, harmful_content_detected, pii_detected
    score: float
    threshold: float | None = None
    read: str | None = None  # the part that scored highest, when the rule reads several
    entities: list[str] = Field(default_factory=list)


class CompressionOutcome(BaseModel):
    """What the `context_compression` plugin did to one conversation (app/pipeline/compression.py);
    counts only, never message content."""

    compressed: bool = Field(description="true when messages were dropped or summarised")
    strategy: Literal["drop", "summarize"]
    budget: int = Field(description="max_tokens of the configuration")
    tokens_before: int
    tokens_after: int
    tokens_saved: int
    over_budget: bool = Field(description="system messages and the last turns alone exceed the budget")
    turns_total: int
    turns_dropped: int
    messages_before: int
    messages_after: int
    summary_tokens: int = 0
    duration_ms: float = 0.0

    def header(self) -> str:
        return (
            f"dropped={self.turns_dropped},tokens_before={self.tokens_before},"
            f"tokens_after={self.tokens_after},strategy={self.strategy}"
        )


class ImmediateResponse(BaseModel):
    """An answer given without calling a backend: cache hit, fast_response, block."""

    kind: Literal["cache_hit", "fast_response", "block"]
    status: int = 200
    body: dict[str, Any]  # a chat.completion, or an error body for blocks
    headers: dict[str, str] = Field(default_factory=dict)
    similarity: float | None = None  # cache hits


class CacheWrite(BaseModel):
    """Where complete() stores the answer when the decision caches responses."""

    partition: str
    ttl_seconds: int
    query_text: str
    # the query's embedding from route(), so complete() stores without a second encoder pass
    vector: list[float] | None = None
    # the partition's epoch token, read at route() before the upstream answers: the store
    # drops the write if a flush covered the partition since (None: the write is unguarded)
    epoch: int | None = None


class MemoryWrite(BaseModel):
    """The decision's `memory` plugin: complete() remembers the user's turn (in the background)."""

    scope: MemoryScope
    turn: str  # the user's last message
    max_memories: int
    dedupe_threshold: float
    decision: str | None = None
    # the scope's context-recovery generation at route(): an invalidation since drops the write
    generation: int | None = None


class ReplayCapture(BaseModel):
    """The chosen decision's `router_replay` plugin: complete() records this request."""

    replay_id: str
    capture_request_body: bool = False
    capture_response_body: bool = False
    max_body_bytes: int | None = None


class ProviderState(BaseModel):
    """A provider-side state that ties a request to the model that made it: a Responses
    `previous_response_id` continues a stored response (and its reasoning items, when it has
    any). The front door sets it from the store, never from the client's body or headers;
    session-aware routing locks the session to `model` (app/pipeline/sessions.py)."""

    model: str  # the model that answered the stored response
    reasoning: bool = False  # the stored response carries reasoning items


class SessionOutcome(BaseModel):
    """What session-aware routing did with one turn (app/pipeline/sessions.py): in the
    `x-vsr-session*` headers, the replay record and the routing preview."""

    key: str  # the session's name: the x-session-id, or a digest of `user` / the fingerprint
    source: Literal["header", "user", "fingerprint"]
    action: Literal["started", "kept", "switched", "per_turn"]
    reason: str  # new_session | same_model | provider_state | tool_call_pending | gain_beats_price | ...
    model: str | None = None  # the model serving this turn
    previous_model: str | None = None
    turns: int = 0  # turns routed in the session before this one
    tool_pending: bool = False  # this request answers a tool call
    gain: float | None = None  # a weighed switch: its expected gain and price (USD)
    price: float | None = None


class RoutePlan(BaseModel):
    request_id: str
    session_id: str | None = None  # the client's x-session-id (replay records group turns by it)
    requested_model: str
    auto: bool  # MoM/auto: signals evaluated; explicit model: pass-through
    stream: bool = False
    recipe: str | None = None  # the recipe that routed an auto request (`default` for MoM/auto)
    decision: str | None = None
    selected_model: str | None = None
    reason_code: str = "auto_routing"  # auto_routing | model_specified | default_model | ...
    confidence: float = 1.0
    candidates: list[UpstreamTarget] = Field(default_factory=list)  # selected first, then fallbacks
    body: dict[str, Any] = Field(default_factory=dict)  # rewritten request body (model not yet rewritten)
    upstream_headers: dict[str, str] = Field(default_factory=dict)  # to add/overwrite on the upstream request
    upstream_headers_remove: list[str] = Field(default_factory=list)
    response_headers: dict[str, str] = Field(default_factory=dict)  # routing headers for the client
    reliability: ReliabilityConfig | None = None
    fallback: FallbackConfig | None = None
    pricing: dict[str, Pricing] = Field(default_factory=dict)  # by model name
    immediate: ImmediateResponse | None = None
    cache_write: CacheWrite | None = None
    memory_write: MemoryWrite | None = None
    memories_recalled: int | None = None  # the memory plugin ran: how many memories it injected
    # the key's budget past its step-down point (app/pipeline/grants.py): state, spend, the models
    budget: dict[str, Any] | None = None
    # the memory scope's context-recovery mark, read once per request (the cache step keys the
    # partition with its generation, recall filters by it); None: not read
    recovery_mark: RecoveryMark | None = None
    rag: dict[str, Any] | None = None  # the rag plugin ran: app/pipeline/rag.py RagUsage
    signals: SignalReport = Field(default_factory=SignalReport)
    security: SecurityChecks = Field(default_factory=SecurityChecks)
    refusal: Refusal | None = None  # set when a guard refused the request
    reasoning: dict[str, Any] = Field(default_factory=dict)  # {enabled, effort, family}
    tools_selected: int = 0
    classification_ms: float = 0.0
    started_at: float = 0.0  # time.time() when route() began
    endpoint: str = "chat_completions"  # the client-facing API (set by the front door), a metrics label
    replay: ReplayCapture | None = None  # set when the decision records replays (x-vsr-replay-id)
    router_replica: str | None = None  # the Router replica that routed it (Ray graph only)
    compression: CompressionOutcome | None = None  # the decision's context_compression plugin ran
    answer_checks: AnswerChecks | None = None  # response_jailbreak / hallucination on the answer
    # the decision's `pii` plugin flagged the request and acted short of blocking it
    pii_action: Literal["mask", "route"] | None = None
    # placeholder -> original, for the front door to restore (app/pipeline/pii_mask.py); its
    # originals never appear in a dump or repr of the plan
    pii_mask: PIIMask | None = None
    # the front door's request span as a W3C traceparent carrier: complete() joins its trace
    trace_context: dict[str, str] = Field(default_factory=dict)
    session: SessionOutcome | None = None  # session-aware routing ran (global.router.session_affinity)
    tie: ProviderState | None = None  # set by the front door (a Responses previous_response_id)


class CompletionReport(BaseModel):
    """What the front door observed; input to complete()."""

    status: int
    model: str | None = None  # the model actually served (after fallback)
    response: dict[str, Any] | None = None  # final chat.completion (streams reassembled)
    stream: bool = False
    stream_finished: bool = True  # aborted streams are never cached
    ttft_s: float | None = None
    total_s: float | None = None
    error_reason: str | None = None  # timeout | upstream_4xx | upstream_5xx | ...
    response_checks: dict[str, Any] | None = None  # AnswerVerdict.summary(): replay records it


class Accounting(BaseModel):
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    cost: float = 0.0
    currency: str = "USD"
    ttft_s: float | None = None
    tpot_s: float | None = None
    cached: bool = False  # answered from the response cache
    cache_written: bool = False  # complete() stored this answer in the response cache
