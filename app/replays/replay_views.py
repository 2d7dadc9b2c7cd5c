"""Derived replay views (docs/management-api.md): a session's trajectory, the shadow
comparison dataset manifest and blinded pairwise judge tasks.

One implementation for every replay backend: the views walk the store's `list` pages
(`ReplaySource`), so the in-memory ring and Redis serve them alike.

Session identity is the record's `session_id` (else `conversation_id`); recipe is its
`recipe` field, a record without one belongs to recipe `default`. A shadow comparison is
a record with a `shadow` object (`{"model", "response", ...}`) recorded by the
`shadow_dispatch` plugin next to the primary's `served_model`/`response`.

Judge tasks are blinded: answers are labelled A/B in an order seeded by the task id
(sha256), never named. The A/B -> model key is returned only to principals holding
`audit.read` (auditors unblind after judging); everyone else gets `key: null`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, Field

from app.replays.replays import OutcomeLog, ReplayPage, ReplaySource, redact_record

DEFAULT_RECIPE = "default"
SCAN_PAGE = 1000
MAX_SCAN = 100_000  # bounds a walk over a store (the ring holds 10 000 by default)
DATASET_FIELDS = ["task_id", "request_id", "timestamp", "prompt", "primary", "shadow"]


class TrajectoryStep(BaseModel):
    replay_id: str
    request_id: str | None
    timestamp: str | None
    sequence: int
    decision: str | None
    model: str | None
    matched_signals: list[str]
    cost: dict[str, Any] | None
    outcome: dict[str, Any] | None
    # session-aware routing's turn: action (started, kept, switched, per_turn), reason, models
    session: dict[str, Any] | None = None


class Trajectory(BaseModel):
    session_id: str
    recipe: str
    steps: list[TrajectoryStep]
    total: int = Field(description="the session's records after the cursor")
    truncated: bool = Field(description="more of the session follows: ask again after next_sequence")
    next_sequence: int


class DatasetManifest(BaseModel):
    recipe: str
    pairs: int
    models: list[dict[str, str]]
    first_timestamp: str | None
    last_timestamp: str | None
    fields: list[str]
    next_sequence: int
    has_more: bool


class JudgeTask(BaseModel):
    task_id: str
    prompt: Any
    answer_a: Any
    answer_b: Any
    key: dict[str, str] | None = None


class JudgeTaskPage(BaseModel):
    tasks: list[JudgeTask]
    next_sequence: int
    has_more: bool
    key_visible: bool


class Scan:
    """Every record after `after_sequence`, oldest first, through the store's pages, at most
    MAX_SCAN of them: `complete` is False when the walk stopped there with records left, and
    `last_sequence` is the last record walked (where a next page resumes)."""

    def __init__(self, source: ReplaySource, after_sequence: int = 0) -> None:
        self.source = source
        self.last_sequence = after_sequence
        self.complete = False

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        seen = 0
        while seen < MAX_SCAN:
            listed = self.source.list(limit=SCAN_PAGE, after_sequence=self.last_sequence)
            page: ReplayPage = await listed if inspect.isawaitable(listed) else listed
            for record in page.records:
                self.last_sequence = int(record["sequence"])
                yield record
            seen += len(page.records)
            if not page.has_more or not page.records:
                self.complete = True
                return


def session_of(record: dict[str, Any]) -> str | None:
    value = record.get("session_id") or record.get("conversation_id")
    return str(value) if value else None


def recipe_of(record: dict[str, Any]) -> str:
    return str(record.get("recipe") or DEFAULT_RECIPE)


def _model(record: dict[str, Any]) -> str | None:
    value = record.get("served_model") or record.get("selected_model") or record.get("model")
    return str(value) if value else None


def latest_outcomes(outcomes: OutcomeLog | None) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for o in outcomes.list() if outcomes is not None else []:
        found[o.replay_id] = {"verdict": o.verdict, "score": o.score, "target": o.target}
    return found


async def trajectory(
    source: ReplaySource,
    outcomes: OutcomeLog | None,
    session_id: str,
    recipe: str,
    limit: int,
    after_sequence: int = 0,
) -> Trajectory:
    """The session's records after `after_sequence` in recorded order, the first `limit` of them."""
    matched: list[dict[str, Any]] = []
    walk = Scan(source, after_sequence)
    async for record in walk:
        if session_of(record) == session_id and recipe_of(record) == recipe:
            matched.append(record)
    verdicts = latest_outcomes(outcomes)
    steps = [
        TrajectoryStep(
            replay_id=str(r["id"]),
            request_id=r.get("request_id"),
            timestamp=r.get("timestamp"),
            sequence=int(r["sequence"]),
            decision=r.get("decision"),
            model=_model(r),
            matched_signals=list(r.get("matched_signals") or []),
            cost=r.get("cost"),
            outcome=verdicts.get(str(r["id"])),
            session=r.get("session"),
        )
        for r in matched[:limit]
    ]
    return Trajectory(
        session_id=session_id,
        recipe=recipe,
        steps=steps,
        total=len(matched),
        truncated=len(matched) > limit or not walk.complete,
        next_sequence=steps[-1].sequence if steps else after_sequence,
    )


def is_shadow_pair(record: dict[str, Any], recipe: str) -> bool:
    shadow = record.get("shadow")
    return isinstance(shadow, dict) and bool(shadow.get("model")) and recipe_of(record) == recipe


class PairPage(BaseModel):
    pairs: list[dict[str, Any]]
    next_sequence: int
    has_more: bool


async def shadow_pairs(source: ReplaySource, recipe: str, after_sequence: int, limit: int) -> PairPage:
    """Up to `limit` shadow comparisons after `after_sequence`, the cursor of the next page and
    whether more may follow (also when the walk stopped at MAX_SCAN: the cursor moves past it)."""
    pairs: list[dict[str, Any]] = []
    walk = Scan(source, after_sequence)
    async for record in walk:
        if is_shadow_pair(record, recipe):
            if len(pairs) == limit:
                return PairPage(pairs=pairs, next_sequence=int(pairs[-1]["sequence"]), has_more=True)
            pairs.append(record)
    return PairPage(pairs=pairs, next_sequence=walk.last_sequence, has_more=not walk.complete)


async def dataset_manifest(
    source: ReplaySource, recipe: str, after_sequence: int, limit: int
) -> DatasetManifest:
    page = await shadow_pairs(source, recipe, after_sequence, limit)
    pairs = page.pairs
    models = sorted({(_model(p) or "unknown", str(p["shadow"]["model"])) for p in pairs})
    times = sorted(str(p["timestamp"]) for p in pairs if p.get("timestamp"))
    return DatasetManifest(
        recipe=recipe,
        pairs=len(pairs),
        models=[{"primary": a, "shadow": b} for a, b in models],
        first_timestamp=times[0] if times else None,
        last_timestamp=times[-1] if times else None,
        fields=DATASET_FIELDS,
        next_sequence=page.next_sequence,
        has_more=page.has_more,
    )


def task_id_of(record: dict[str, Any]) -> str:
    return f"judge-{record['id']}"


def shadow_first(task_id: str) -> bool:
    """The blinded order: deterministic per task, about half the tasks each way."""
    return hashlib.sha256(task_id.encode("utf-8")).digest()[0] % 2 == 1


def judge_task(record: dict[str, Any], *, data: bool, secrets: bool, with_key: bool) -> JudgeTask:
    primary = redact_record(record, data=data, secrets=secrets)
    shadow = redact_record(dict(record["shadow"]), data=data, secrets=secrets)
    task_id = task_id_of(record)
    first = (_model(record) or "unknown", primary.get("response"))
    second = (str(record["shadow"]["model"]), shadow.get("response"))
    if shadow_first(task_id):
        first, second = second, first
    prompt = primary.get("request", primary.get("prompt"))
    key = {"A": first[0], "B": second[0]} if with_key else None
    return JudgeTask(task_id=task_id, prompt=prompt, answer_a=first[1], answer_b=second[1], key=key)


async def judge_tasks(
    source: ReplaySource,
    recipe: str,
    after_sequence: int,
    limit: int,
    *,
    data: bool,
    secrets: bool,
    with_key: bool,
) -> JudgeTaskPage:
    page = await shadow_pairs(source, recipe, after_sequence, limit)
    return JudgeTaskPage(
        tasks=[judge_task(p, data=data, secrets=secrets, with_key=with_key) for p in page.pairs],
        next_sequence=page.next_sequence,
        has_more=page.has_more,
        key_visible=with_key,
    )
