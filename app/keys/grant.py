"""What the Router is told about a request's key: the models it may route to, and whether its
budget has stepped down (app/pipeline/phases/select.py applies both)."""

from __future__ import annotations

from pydantic import BaseModel


class ModelGrant(BaseModel):
    key_id: str | None  # None: a caller without a key, bound by the listeners' grants alone
    models: list[str]  # a selection never leaves these; an explicit other model is 403
    # The budget is past `step_down_at`: only models cheaper than the decision's pick.
    step_down: bool = False
    spent_usd: float = 0.0
    limit_usd: float | None = None
