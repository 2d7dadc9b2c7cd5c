"""`svc-sr benchmark guard`: send labeled cases through a config's guards and say what each did.

Two ways, one outcome per case (app/benchmark/guard_report.py turns them into rates):

- **offline** (`run_offline`): the config's own `RouterPipeline.route()` in this process over
  local services (app/benchmark/local_services.py): the code that serves live requests, its
  global prompt guard, decision plugins and PII policy included; no Ray, no upstream. A case is
  refused when its plan is a `block`.
- **against a running router** (`run_endpoint`): each case as a chat request (`model: MoM`,
  `max_tokens: 1`) to `<endpoint>/v1/chat/completions`; refused when the answer is 403
  `security_violation`. Everything the router does is measured, front door included.

The human asks are embedded once, in batches, before routing (offline), as the routing
benchmark does; conversations' other texts are encoded when a guard asks for them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from app.benchmark.guard_report import CaseOutcome
from app.benchmark.guard_sets import GuardCase
from app.benchmark.local_services import VectorTable, local_services, shared_vector_table
from app.benchmark.runner import AUTO_MODEL, as_config
from app.common.chat_text import human_ask
from app.config.document import RouterConfig
from app.pipeline.pipeline import RouterPipeline
from app.pipeline.selection import RoutingError

ProgressFn = Callable[[int, int], None]  # (done, total)
DEFAULT_CONCURRENCY = 32
PREVIEW_CHARS = 160
PII_CODE = "pii_detected"


def _preview(case: GuardCase) -> str:
    text = case.text if case.text is not None else human_ask(case.chat_messages()) or str(case.messages)
    return " ".join(text.split())[:PREVIEW_CHARS]


def judge(case: GuardCase, status: int | None, body: Any) -> CaseOutcome:
    """A case's outcome from the answer's status and error body."""
    raw = body.get("error") if isinstance(body, Mapping) else None
    error: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    blocked = status == 403 and error.get("type") == "security_violation"
    raw_details = error.get("details")
    details: Mapping[str, Any] = raw_details if isinstance(raw_details, Mapping) else {}
    found = [str(e) for e in details.get("entities_found") or []] if blocked else []
    code = str(error.get("code")) if blocked and error.get("code") else None
    caught = blocked
    if case.entities:
        caught = blocked and code == PII_CODE and set(case.entities) <= set(found)
    return CaseOutcome(
        label=case.label,
        category=case.category,
        source=case.source,
        style=case.style,
        blocked=blocked,
        caught=case.attack and caught,
        status=status,
        code=code,
        found=found,
        preview=_preview(case),
    )


def _failed(case: GuardCase, reason: str) -> CaseOutcome:
    return CaseOutcome(
        label=case.label,
        category=case.category,
        source=case.source,
        style=case.style,
        error=reason,
        preview=_preview(case),
    )


def chat_body(case: GuardCase) -> dict[str, Any]:
    return {"model": AUTO_MODEL, "messages": case.chat_messages()}


async def _in_batches(
    cases: Sequence[GuardCase],
    one: Callable[[int, GuardCase], Any],
    concurrency: int,
    progress: ProgressFn | None,
) -> list[CaseOutcome]:
    out: list[CaseOutcome] = []
    for start in range(0, len(cases), concurrency):
        batch = cases[start : start + concurrency]
        out += await asyncio.gather(*(one(start + i, c) for i, c in enumerate(batch)))
        if progress is not None:
            progress(len(out), len(cases))
    return out


async def run_offline(
    config: RouterConfig | str,
    cases: Sequence[GuardCase],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: ProgressFn | None = None,
    vectors: VectorTable | None = None,
) -> list[CaseOutcome]:
    """Route every case through the config's pipeline in this process."""
    loaded = as_config(config)
    table = vectors if vectors is not None else shared_vector_table()
    local = local_services(loaded, table)
    try:
        pipeline = RouterPipeline(loaded, local.services, rng=random.Random(0))
        await pipeline.warm_up()
        asks = [a for a in (human_ask(c.chat_messages()) for c in cases) if a]
        await table.fill(asks)

        async def one(index: int, case: GuardCase) -> CaseOutcome:
            try:
                plan = await pipeline.route(chat_body(case), {}, f"guard-benchmark-{index}")
            except RoutingError as exc:  # not a guard's refusal: the guards let it through
                return judge(case, exc.status, {"error": {"type": exc.type, "code": exc.code}})
            if plan.immediate is None:
                return judge(case, 200, None)
            return judge(case, plan.immediate.status, plan.immediate.body)

        return await _in_batches(cases, one, concurrency, progress)
    finally:
        await local.aclose()


async def run_endpoint(
    endpoint: str,
    cases: Sequence[GuardCase],
    *,
    concurrency: int = 8,
    timeout_s: float = 60.0,
    api_key: str | None = None,
    progress: ProgressFn | None = None,
) -> list[CaseOutcome]:
    """Send every case to a running router's chat completions; a case it does not answer
    (connection error, timeout, a 5xx) is an error, in no rate."""
    url = endpoint.rstrip("/")
    url = url if url.endswith("/v1") else f"{url}/v1"
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(timeout=timeout_s, headers=headers) as client:

        async def one(index: int, case: GuardCase) -> CaseOutcome:
            body = {**chat_body(case), "max_tokens": 1}
            try:
                response = await client.post(f"{url}/chat/completions", json=body)
            except httpx.HTTPError as exc:
                return _failed(case, f"{type(exc).__name__}: {exc}")
            if response.status_code >= 500:
                return _failed(case, f"HTTP {response.status_code}")
            try:
                payload = response.json()
            except ValueError:
                payload = None
            return judge(case, response.status_code, payload)

        return await _in_batches(cases, one, concurrency, progress)
