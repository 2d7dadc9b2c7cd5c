"""The native decision API's backend over svc-srun workers (/v1/decisions, docs/model-runtime.md).

`ClientDecisionSource` answers the router frontend's decision routes (app/api/decisions.py,
which takes any `DecisionSource`) through an `SrunClient`: a managed worker's (the
supervisor picks a ready replica per call) or an attached one's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.srun.client import SrunClient, spread_overload

# The native decision API's budget for one call (the contract's): past it the frontend answers 504
# `systemone_deadline_exceeded`.
DEADLINE_S = 30.0


class ClientDecisionSource:
    """A managed or attached worker through `app.srun.client.SrunClient`.

    `client`: an SrunClient, or a callable returning one per call (a supervisor's round robin
    over ready replicas). A request naming no model, or one of `names` (the deployment's key),
    goes to `served_name`. `deadline_s` bounds each call, retries over a restart included.
    `other`: another replica's client than the one given (the supervisor's `other_client`): a
    worker's 429 `overloaded` is tried there once before it is passed back."""

    def __init__(
        self,
        client: Any,
        served_name: str | None = None,
        *,
        deadline_s: float = DEADLINE_S,
        names: tuple[str, ...] = (),
        other: Callable[[SrunClient], SrunClient | None] | None = None,
    ) -> None:
        self.client = client
        self.served_name = served_name
        self.deadline_s = deadline_s
        self.names = names
        self.other = other

    def _client(self) -> Any:
        return self.client() if callable(self.client) else self.client

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.served_name and ("model" not in body or body["model"] in self.names):
            body = {**body, "model": self.served_name}
        answer: dict[str, Any] = await spread_overload(
            self._client(), self.other, lambda c: c.decisions(body, deadline_s=self.deadline_s)
        )
        return answer

    async def models(self) -> list[dict[str, Any]]:
        cards = (await spread_overload(self._client(), self.other, lambda c: c.models())).get("data", [])
        return [c for c in cards if "decisions" in c.get("surfaces", [])]
