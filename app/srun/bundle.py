"""/v1/bundle: several tasks across models in one call. Tasks run concurrently (their rows
share batches with everything else in flight) and come back in task order, each with the
status and body or error it would have had alone. With options.deadline_ms, a task still
running at the deadline is answered 504 `deadline_exceeded` (the others keep their answers);
the deadline bounds the caller's wait, not a forward already running."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from app.runtime.schemas import parse_request
from app.srun.schemas import BundleRequest, BundleResponse, BundleResult, RejectedInput, WorkerErrorDetail
from app.srun.timing import ServerTiming

Handler = Callable[[str, dict[str, Any], ServerTiming], Awaitable[tuple[dict[str, Any], bytes | None]]]
Failure = Callable[[BaseException], tuple[int, str, str]]
DEADLINE_EXCEEDED = "deadline_exceeded"


async def run_bundle(
    body: Any,
    handle: Handler,
    failure: Failure,
    max_tasks: int,
    timing: ServerTiming,
) -> BundleResponse:
    """InvalidRequest for a malformed bundle or more than `max_tasks` tasks."""
    if isinstance(body, dict) and isinstance(body.get("tasks"), list) and len(body["tasks"]) > max_tasks:
        raise RejectedInput(
            f"tasks: {len(body['tasks'])} tasks; at most {max_tasks} per bundle", "too_many_tasks", max_tasks
        )
    request = parse_request(BundleRequest, body)
    timings = [ServerTiming() for _ in request.tasks]
    finished: list[int] = []

    async def one(index: int) -> BundleResult:
        task = request.tasks[index]
        try:
            answer, cached = await handle(task.surface, task.body, timings[index])
            finished.append(index)
            payload = json.loads(cached) if cached is not None else answer
            return BundleResult(id=task.id, surface=task.surface, status=200, body=payload)
        except Exception as exc:  # each task keeps the status it would have had alone
            finished.append(index)
            status, code, message = failure(exc)
            return BundleResult(
                id=task.id,
                surface=task.surface,
                status=status,
                error=WorkerErrorDetail(
                    code=code,
                    message=message,
                    reason=getattr(exc, "reason", None),
                    limit=getattr(exc, "limit", None),
                ),
            )

    running = [asyncio.ensure_future(one(i)) for i in range(len(request.tasks))]
    deadline = request.options.deadline_ms / 1000.0 if request.options.deadline_ms else None
    await asyncio.wait(running, timeout=deadline)
    results = []
    for index, future in enumerate(running):
        if future.done():
            results.append(future.result())
            continue
        future.cancel()
        task = request.tasks[index]
        results.append(
            BundleResult(
                id=task.id,
                surface=task.surface,
                status=504,
                error=WorkerErrorDetail(
                    code=DEADLINE_EXCEEDED,
                    message=f"task {task.id!r} missed the bundle deadline "
                    f"of {request.options.deadline_ms} ms",
                ),
            )
        )
    if finished:
        last = timings[finished[-1]]
        timing.add("parse", last.phases["parse"])
        for phase in ("tokenize", "queue", "forward", "post"):
            timing.phases[phase] = last.phases[phase]
    return BundleResponse(results=results)
