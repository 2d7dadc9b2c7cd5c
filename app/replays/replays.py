"""Replay records of the `router_replay` plugin, their aggregates, and outcome submissions.

`ReplaySource` is what the API reads (the lead feeds a `ReplayStore` from the pipeline, a
Ray deployment may implement the same protocol). `ReplayStore` is a bounded in-memory ring:
`record(dict)` keeps a copy with an id, a sequence and a timestamp; the oldest records
go first. Records may hold request content; the API hides it from principals without
`data.read` (see `redact_record`).

`replays_redis` keeps the same records and outcomes in Redis for every Ingress replica; it
pages and aggregates with the functions here (`replay_page`, `record_matches`,
`aggregate_records`), and `OutcomeLog` is what the API needs of either outcome store.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel, Field

from app.common.redaction import REDACTED, redact

DEFAULT_REPLAY_CAPACITY = 10_000
CONTENT_KEYS = frozenset(
    {
        "request",
        "response",
        "messages",
        "prompt",
        "body",
        "input",
        "output",
        "content",
        "text",
        "completion",
        "choices",
        "query",
    }
)


class ReplayPage(BaseModel):
    records: list[dict[str, Any]]
    next_sequence: int
    has_more: bool
    oldest_sequence: int | None
    # Sequences are consecutive and records leave only from the oldest end, so the newest N
    # records follow newest_sequence - N: a reader jumps there instead of paging everything.
    newest_sequence: int | None = None


class ModelAggregate(BaseModel):
    requests: int = 0
    errors: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: dict[str, float] = Field(default_factory=dict, description="currency -> total")
    mean_latency_ms: float | None = None


class ReplayAggregate(BaseModel):
    total: int
    by_model: dict[str, ModelAggregate]
    by_decision: dict[str, int]
    by_reason_code: dict[str, int]
    cost: dict[str, float]
    cache_hit_rate: float | None
    first_timestamp: str | None
    last_timestamp: str | None


class ReplaySource(Protocol):
    """What the API reads; each method may also return an awaitable of its result (the Ray
    graph's adapter over the Observability deployment does)."""

    def list(
        self, limit: int = 100, after_sequence: int = 0, decision: str | None = None, model: str | None = None
    ) -> ReplayPage | Awaitable[ReplayPage]: ...

    def get(self, replay_id: str) -> dict[str, Any] | None | Awaitable[dict[str, Any] | None]: ...

    def aggregate(
        self, decision: str | None = None, model: str | None = None
    ) -> ReplayAggregate | Awaitable[ReplayAggregate]: ...


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _model_of(record: dict[str, Any]) -> str:
    return str(record.get("selected_model") or record.get("model") or "unknown")


def replay_item(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The id `record` asks for (`id` or `replay_id`, else a new one) and the copy to keep,
    stamped now unless it has a timestamp; the store sets `id` and `sequence`."""
    item = copy.deepcopy(dict(record))
    item.setdefault("timestamp", _now())
    return str(item.get("id") or item.get("replay_id") or uuid.uuid4().hex), item


class ReplayStore:
    def __init__(self, capacity: int = DEFAULT_REPLAY_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._records: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._by_id: dict[str, dict[str, Any]] = {}
        self._sequence = 0
        self._lock = threading.Lock()

    def record(self, record: dict[str, Any]) -> str:
        """Keep a copy of `record`; returns its id (`id` or `replay_id` when given, else a new one)."""
        replay_id, item = replay_item(record)
        with self._lock:
            self._sequence += 1
            if replay_id in self._by_id:  # an id is one record: a repeat gets a fresh id
                replay_id = uuid.uuid4().hex
            item["id"] = replay_id
            item["sequence"] = self._sequence
            if len(self._records) == self._records.maxlen:
                self._by_id.pop(self._records[0]["id"], None)
            self._records.append(item)
            self._by_id[replay_id] = item
            return replay_id

    def __len__(self) -> int:
        return len(self._records)

    def _matching(self, decision: str | None, model: str | None) -> list[dict[str, Any]]:
        with self._lock:
            records = list(self._records)
        return [r for r in records if record_matches(r, decision, model)]

    def list(
        self, limit: int = 100, after_sequence: int = 0, decision: str | None = None, model: str | None = None
    ) -> ReplayPage:
        with self._lock:
            oldest = self._records[0]["sequence"] if self._records else None
            newest = self._records[-1]["sequence"] if self._records else None
        matching = [r for r in self._matching(decision, model) if r["sequence"] > after_sequence]
        return replay_page(copy.deepcopy(matching[: limit + 1]), limit, after_sequence, (oldest, newest))

    def get(self, replay_id: str) -> dict[str, Any] | None:
        with self._lock:
            record = self._by_id.get(replay_id)
            return copy.deepcopy(record) if record is not None else None

    def aggregate(self, decision: str | None = None, model: str | None = None) -> ReplayAggregate:
        return aggregate_records(self._matching(decision, model))


def replay_page(
    matching: list[dict[str, Any]], limit: int, after_sequence: int, kept: tuple[int | None, int | None]
) -> ReplayPage:
    """The page of `matching` (the filtered records after `after_sequence`, oldest first;
    more than `limit` of them when there are more); `kept` = the store's (oldest, newest)
    sequences."""
    page = matching[:limit]
    return ReplayPage(
        records=page,
        has_more=len(matching) > limit,
        next_sequence=page[-1]["sequence"] if page else max(after_sequence, 0),
        oldest_sequence=kept[0],
        newest_sequence=kept[1],
    )


def record_matches(record: dict[str, Any], decision: str | None, model: str | None) -> bool:
    """The list/aggregate filter: None matches any decision or model."""
    return (decision is None or record.get("decision") == decision) and (
        model is None or _model_of(record) == model
    )


def aggregate_records(records: list[dict[str, Any]]) -> ReplayAggregate:
    """Totals over `records`, oldest first (every replay store aggregates with this)."""
    by_model: dict[str, ModelAggregate] = {}
    latency: dict[str, list[float]] = {}
    by_decision: dict[str, int] = {}
    by_reason: dict[str, int] = {}
    cost: dict[str, float] = {}
    hits = 0
    for r in records:
        name = _model_of(r)
        agg = by_model.setdefault(name, ModelAggregate())
        agg.requests += 1
        status = r.get("status")
        if r.get("error") or (isinstance(status, int) and status >= 400):
            agg.errors += 1
        if r.get("cache_hit"):
            agg.cache_hits += 1
            hits += 1
        raw_usage = r.get("usage")
        usage = raw_usage if isinstance(raw_usage, dict) else {}
        agg.prompt_tokens += int(_number(usage.get("prompt_tokens")))
        agg.completion_tokens += int(_number(usage.get("completion_tokens")))
        amount, currency = _cost_of(r)
        if amount:
            agg.cost[currency] = round(agg.cost.get(currency, 0.0) + amount, 10)
            cost[currency] = round(cost.get(currency, 0.0) + amount, 10)
        if isinstance(r.get("latency_ms"), int | float):
            latency.setdefault(name, []).append(float(r["latency_ms"]))
        key = str(r.get("decision") or "")
        by_decision[key] = by_decision.get(key, 0) + 1
        if r.get("reason_code"):
            by_reason[str(r["reason_code"])] = by_reason.get(str(r["reason_code"]), 0) + 1
    for name, values in latency.items():
        by_model[name].mean_latency_ms = round(sum(values) / len(values), 3)
    return ReplayAggregate(
        total=len(records),
        by_model=by_model,
        by_decision=by_decision,
        by_reason_code=by_reason,
        cost=cost,
        cache_hit_rate=round(hits / len(records), 6) if records else None,
        first_timestamp=records[0].get("timestamp") if records else None,
        last_timestamp=records[-1].get("timestamp") if records else None,
    )


def _cost_of(record: dict[str, Any]) -> tuple[float, str]:
    cost = record.get("cost")
    if isinstance(cost, dict):
        return _number(cost.get("amount", cost.get("total"))), str(cost.get("currency") or "USD")
    return _number(cost), str(record.get("currency") or "USD")


def redact_record(record: dict[str, Any], *, data: bool, secrets: bool) -> dict[str, Any]:
    """Request/response content hidden without `data`, credentials and header values without `secrets`."""
    out = record if secrets else redact(record)
    if not data:
        out = {
            key: (REDACTED if key in CONTENT_KEYS and value is not None else value)
            for key, value in out.items()
        }
    return out


# ---------------------------------------------------------------- outcomes


class OutcomeIn(BaseModel):
    replay_id: str = Field(min_length=1, max_length=256)
    target: str = Field(min_length=1, max_length=256)
    verdict: str = Field(min_length=1, max_length=64)
    score: float | None = Field(default=None, allow_inf_nan=False)
    source: str | None = Field(default=None, description="ignored: provenance is the authenticated principal")


_WIN = ("good", "correct", "right", "win", "won", "thumbs_up", "accepted", "accept", "pass",
        "passed", "positive", "preferred", "better", "success", "helpful", "upvote")  # fmt: skip
_LOSS = ("bad", "wrong", "incorrect", "loss", "lost", "lose", "thumbs_down", "rejected", "reject",
         "fail", "failed", "negative", "worse", "failure", "unhelpful", "downvote")  # fmt: skip
_TIE = ("tie", "draw", "neutral", "same", "equal", "both_good", "both_bad")
VERDICTS: dict[str, float] = (
    {word: 1.0 for word in _WIN} | dict.fromkeys(_LOSS, 0.0) | dict.fromkeys(_TIE, 0.5)
)


def outcome_score(verdict: str, score: float | None) -> float | None:
    """The subject's result in [0, 1], or None when the outcome says none (app/pipeline/learning/elo_feedback.py)."""
    if score is not None and 0.0 <= score <= 1.0:
        return float(score)
    return VERDICTS.get(verdict.strip().lower().replace("-", "_").replace(" ", "_"))


class OutcomeRecord(BaseModel):
    outcome_id: str
    replay_id: str
    target: str
    verdict: str
    score: float | None
    source: str
    recorded_at: str
    idempotent_replay: bool = False


class OutcomePage(BaseModel):
    outcomes: list[OutcomeRecord]
    total: int = Field(description="outcomes matching the query; `outcomes` holds the newest `limit`")


class IdempotencyConflict(Exception):
    pass


class OutcomeLog(Protocol):
    """What the management API needs of an outcome store: `OutcomeStore` (one process) or
    `app.replays.replays_redis.RedisOutcomeStore` (shared by every Ingress replica)."""

    def submit(
        self, outcome: OutcomeIn, principal: str, idempotency_key: str | None = None
    ) -> OutcomeRecord: ...

    def list(self) -> list[OutcomeRecord]: ...


def outcome_fingerprint(outcome: OutcomeIn, principal: str) -> str:
    """What an Idempotency-Key is bound to: the body (less `source`) and the submitter."""
    return hashlib.sha256(
        json.dumps([outcome.model_dump(exclude={"source"}), principal], sort_keys=True).encode()
    ).hexdigest()


def new_outcome_record(outcome: OutcomeIn, principal: str) -> OutcomeRecord:
    return OutcomeRecord(
        outcome_id=uuid.uuid4().hex,
        replay_id=outcome.replay_id,
        target=outcome.target,
        verdict=outcome.verdict,
        score=outcome.score,
        source=principal,
        recorded_at=_now(),
    )


class OutcomeStore:
    """Outcomes (bounded) with Idempotency-Key: the same key and body answers the first result
    again; the same key with another body is a conflict."""

    def __init__(self, capacity: int = DEFAULT_REPLAY_CAPACITY) -> None:
        self.capacity = capacity
        self._outcomes: deque[OutcomeRecord] = deque(maxlen=capacity)
        self._keys: OrderedDict[str, tuple[str, OutcomeRecord]] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, outcome: OutcomeIn, principal: str, idempotency_key: str | None = None) -> OutcomeRecord:
        fingerprint = outcome_fingerprint(outcome, principal)
        with self._lock:
            if idempotency_key is not None:
                seen = self._keys.get(idempotency_key)
                if seen is not None:
                    if seen[0] != fingerprint:
                        raise IdempotencyConflict(idempotency_key)
                    return seen[1].model_copy(update={"idempotent_replay": True})
            record = new_outcome_record(outcome, principal)
            self._outcomes.append(record)
            if idempotency_key is not None:
                self._keys[idempotency_key] = (fingerprint, record)
                while len(self._keys) > self.capacity:
                    self._keys.popitem(last=False)
            return record

    def list(self) -> list[OutcomeRecord]:
        with self._lock:
            return list(self._outcomes)
