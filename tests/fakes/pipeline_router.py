"""A RouterClient over an in-process RouterPipeline: what a front door talks to, without Ray.

Unit and contract tests of the exchange and both doors use it (subclassing it to edit plans or
answer fixed verdicts) instead of each writing its own near-copy."""

from __future__ import annotations

from typing import Any

from app.keys.grant import ModelGrant
from app.pipeline import RouterPipeline
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict
from app.pipeline.plan import Accounting, CompletionReport, ProviderState, RoutePlan


class PipelineRouter:
    """Routes and checks answers with `pipeline`; each complete() report is kept in `reports`.

    `account`: complete() returns the pipeline's own accounting (cost, metrics, replay); else a
    bare Accounting naming the model, for tests that look only at what the door hands over."""

    def __init__(self, pipeline: RouterPipeline, *, account: bool = False) -> None:
        self.pipeline = pipeline
        self.account = account
        self.reports: list[CompletionReport] = []

    async def route(
        self,
        body: dict[str, Any],
        headers: dict[str, str],
        request_id: str,
        grant: ModelGrant | None = None,
        tie: ProviderState | None = None,
    ) -> RoutePlan:
        return self.edit(await self.pipeline.route(body, headers, request_id, grant, tie))

    def edit(self, plan: RoutePlan) -> RoutePlan:
        """What a subclass changes on the pipeline's plan (an immediate answer, answer checks)."""
        return plan

    async def check_answer(self, checks: AnswerChecks, answer: str, context: list[str]) -> AnswerVerdict:
        return await self.pipeline.check_answer(checks, answer, context)

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting:
        self.reports.append(report)
        if self.account:
            return await self.pipeline.complete(plan, report)
        return Accounting(model=report.model)
