"""Router-side stage calls to model-runtime deployments (the contract's limits,
docs/model-runtime.md: "Router-side stage calls: a stage's other calls go once no signal can
add one, or 2 ms after the first"; the router-side runtime metrics): the questions one
request's signal stage asks the same deployment concurrently go as one `POST /v1/bundle`.

A request's stage is a `StageScope`, entered by the signal phase (`enter_stage(ctx)`, one per
request's SignalContext) and found by the host through a context variable, so the families
evaluated concurrently (asyncio.gather copies the context into each task) share it. The first
question to a deployment opens a collection; the questions arriving while it is open join it.
It closes once `IDLE_TURNS` event-loop turns pass with no new question (every signal that was
going to ask has asked) or `window_s` after its first question, whichever is first; then its
questions go as bundles of at most `MAX_BUNDLE_TASKS` (the worker's `--max-bundle-tasks`
default), a lone question as its own call (`/v1/<surface>`, as without bundling: a bundle of one
only adds the bundle's wrapping on both sides). A question arriving after the send opens the
next collection (a `later` call).

Each question gets what its own call would have given: the task's body, or `RuntimeCallError`
with the task's status and code; a failed bundle call fails each of its questions with that
call's error. Each question waits at most its own deadline.

Metrics: `svc_model_runtime_bundle_question_wait_seconds` per collected question (its arrival to
its call's send), `svc_model_runtime_bundle_wait_seconds` per call sent from a collection (its
first question to the send; a lone question counts as a bundle of one in both), and
`svc_model_runtime_stage_decision_calls_total{deployment, round}` per call a stage makes to a
deployment (a bundle is one call): `first` for the request's first call to that deployment,
`later` for each following one. svc-sr's router asks no `/v1/decisions` questions while routing
(the native decision API is a proxied user request, not a stage), so the stage's calls are its
signal calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.srun.client import RuntimeCallError
from app.srun.runtime_metrics import RuntimeMetrics

MAX_BUNDLE_TASKS = 64
IDLE_TURNS = 3
BUNDLED_SURFACES = frozenset({"classify", "decisions"})
DEFAULT_WINDOW_MS = 2.0

# (surface, body, deadline_s) -> answer: one call to the deployment (with its overload spread).
Send = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any]]]


@dataclass
class _Question:
    surface: str
    body: dict[str, Any]
    deadline: float  # time.monotonic() by which the asker gives up
    arrived: float = field(default_factory=time.perf_counter)
    answer: asyncio.Future[dict[str, Any]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass
class _Collection:
    questions: list[_Question] = field(default_factory=list)
    opened: float = field(default_factory=time.perf_counter)


class StageScope:
    """One request's stage: calls made per deployment (for the round) and open collections."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.open: dict[str, _Collection] = {}
        self._senders: set[asyncio.Task[None]] = set()

    def round(self, deployment: str) -> str:
        """The round of the call about to go to `deployment` (and count it)."""
        made = self.calls.get(deployment, 0)
        self.calls[deployment] = made + 1
        return "first" if made == 0 else "later"

    async def ask(
        self,
        deployment: str,
        surface: str,
        body: dict[str, Any],
        deadline_s: float,
        send: Send,
        metrics: RuntimeMetrics,
        window_s: float,
    ) -> dict[str, Any]:
        """The answer to one question, sent with the others collected for `deployment`."""
        question = _Question(surface, body, time.monotonic() + deadline_s)
        # An asker that gave up never reads its answer: mark a late failure as read.
        question.answer.add_done_callback(lambda f: f.cancelled() or f.exception())
        collection = self.open.get(deployment)
        if collection is None:
            collection = self.open[deployment] = _Collection()
            task = asyncio.get_running_loop().create_task(
                self._send_when_closed(deployment, collection, send, metrics, window_s)
            )
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)
        collection.questions.append(question)
        try:  # shielded: one asker giving up leaves the call to the others
            return await asyncio.wait_for(asyncio.shield(question.answer), deadline_s)
        except TimeoutError:
            raise RuntimeCallError(504, "timeout", f"{deployment}: no answer before the deadline") from None

    async def _send_when_closed(
        self, deployment: str, collection: _Collection, send: Send, metrics: RuntimeMetrics, window_s: float
    ) -> None:
        closes = collection.opened + window_s
        idle = 0
        while idle < IDLE_TURNS and time.perf_counter() < closes:
            seen = len(collection.questions)
            await asyncio.sleep(0)
            idle = idle + 1 if len(collection.questions) == seen else 0
        if self.open.get(deployment) is collection:
            del self.open[deployment]
        questions = collection.questions
        chunks = [questions[i : i + MAX_BUNDLE_TASKS] for i in range(0, len(questions), MAX_BUNDLE_TASKS)]
        await asyncio.gather(*(self._send(deployment, chunk, send, metrics) for chunk in chunks))

    async def _send(
        self, deployment: str, questions: list[_Question], send: Send, metrics: RuntimeMetrics
    ) -> None:
        sent = time.perf_counter()
        metrics.observe("svc_model_runtime_bundle_wait_seconds", sent - questions[0].arrived)
        for q in questions:
            metrics.observe("svc_model_runtime_bundle_question_wait_seconds", sent - q.arrived)
        metrics.inc(
            "svc_model_runtime_stage_decision_calls_total",
            deployment=deployment,
            round=self.round(deployment),
        )
        deadline_s = max(0.001, max(q.deadline for q in questions) - time.monotonic())
        try:
            if len(questions) == 1:
                q = questions[0]
                outcomes: list[dict[str, Any] | BaseException] = [await send(q.surface, q.body, deadline_s)]
            else:
                answer = await send("bundle", bundle_body(questions, deadline_s), deadline_s)
                outcomes = read_bundle(answer, len(questions), deployment, metrics)
        except Exception as exc:  # the call failed: each question as its own call would have
            outcomes = [exc] * len(questions)
        except asyncio.CancelledError:  # the host is going away: no question waits for nothing
            for q in questions:
                if not q.answer.done():
                    q.answer.set_exception(
                        RuntimeCallError(503, "unavailable", f"{deployment}: call canceled")
                    )
            raise
        for q, outcome in zip(questions, outcomes, strict=True):
            if q.answer.done():
                continue
            if isinstance(outcome, BaseException):
                q.answer.set_exception(outcome)
            else:
                q.answer.set_result(outcome)


def bundle_body(questions: list[_Question], deadline_s: float) -> dict[str, Any]:
    """The /v1/bundle body: one task per question (id = its index), the call's deadline."""
    deadline_ms = min(600_000, max(1, int(deadline_s * 1000)))
    return {
        "tasks": [{"id": str(i), q.surface: q.body} for i, q in enumerate(questions)],
        "options": {"deadline_ms": deadline_ms},
    }


def read_bundle(
    answer: dict[str, Any], count: int, deployment: str, metrics: RuntimeMetrics
) -> list[dict[str, Any] | BaseException]:
    """Each task's body, or the RuntimeCallError its status and code make; an answer without one
    result per task is unreadable (svc_model_runtime_unknown_answers_total) and fails them all."""
    results = answer.get("results")
    by_id = {r.get("id"): r for r in results if isinstance(r, dict)} if isinstance(results, list) else {}
    if len(by_id) != count or any(str(i) not in by_id for i in range(count)):
        metrics.inc("svc_model_runtime_unknown_answers_total", deployment=deployment, reason="bundle_results")
        raise RuntimeCallError(502, "unknown_answer", "/v1/bundle: not one result per task")
    out: list[dict[str, Any] | BaseException] = []
    for i in range(count):
        result = by_id[str(i)]
        status = int(result.get("status") or 0)
        body = result.get("body")
        if 200 <= status < 300 and isinstance(body, dict):
            out.append(body)
            continue
        detail = result.get("error")
        error: dict[str, Any] = detail if isinstance(detail, dict) else {}
        out.append(
            RuntimeCallError(
                status if status >= 400 else 502,
                str(error.get("code", "unknown_answer")),
                str(error.get("message", "task without an answer")),
            )
        )
    return out


_STAGE: contextvars.ContextVar[StageScope | None] = contextvars.ContextVar("svc_sr_stage", default=None)
_SCOPES: weakref.WeakKeyDictionary[Any, StageScope] = weakref.WeakKeyDictionary()


def enter_stage(owner: Any = None) -> StageScope:
    """The stage of the request `owner` stands for (its SignalContext; None: a new stage), made
    current for the calling task and the tasks it starts from now on."""
    scope = _SCOPES.get(owner) if owner is not None else None
    if scope is None:
        scope = StageScope()
        if owner is not None:
            _SCOPES[owner] = scope
    _STAGE.set(scope)
    return scope


def current_stage() -> StageScope | None:
    return _STAGE.get()
