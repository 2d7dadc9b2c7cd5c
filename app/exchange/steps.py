"""What an exchange answers a front door at each step (app/exchange/exchange.py): a Reply to
send as it is, a Forward to the plan's candidates, the ResponseHead of an upstream's answer; and
the RouterClient an exchange asks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from app.keys.grant import ModelGrant
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict
from app.pipeline.plan import Accounting, CompletionReport, ProviderState, RoutePlan

JSON = "application/json"


@dataclass
class Reply:
    """An answer the front door sends as it is."""

    status: int
    headers: dict[str, str]
    body: bytes
    content_type: str = JSON


@dataclass
class Forward:
    """Routed: send `body` (a chat body) to `plan.candidates`."""

    plan: RoutePlan
    body: dict[str, Any]


@dataclass
class ResponseHead:
    """What the client gets for the upstream's response head."""

    status: int
    headers: dict[str, str]
    streaming: bool  # an event stream: relay it chunk by chunk
    hold: bool = False  # an event stream checked whole: read it all, then `held_stream`


class RouterClient(Protocol):
    """The Router as a front door sees it (a DeploymentHandle adapter or the pipeline itself)."""

    async def route(
        self,
        body: dict[str, Any],
        headers: dict[str, str],
        request_id: str,
        grant: ModelGrant | None = None,
        tie: ProviderState | None = None,
    ) -> RoutePlan: ...

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting: ...

    async def check_answer(self, checks: AnswerChecks, answer: str, context: list[str]) -> AnswerVerdict: ...
