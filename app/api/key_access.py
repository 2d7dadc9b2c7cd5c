"""The API-key gate (app/keys/gate.py `KeyGate.authenticate`) as every data-plane route the
exchange does not drive asks it: the Responses store routes, /v1/models and the
native decision API (docs/security.md "Keys and budgets"). 401 where keys are required and the
caller has no known key; otherwise the caller's key (None: none)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from app.keys.gate import KeyGate
from app.keys.records import KeyRecord

Caller = Callable[[Request], Awaitable[KeyRecord | None]]


def caller(gate: KeyGate) -> Caller:
    async def key(request: Request) -> KeyRecord | None:
        return await gate.authenticate(request.headers)

    return key


async def anyone(request: Request) -> KeyRecord | None:
    """No key asked: the native decision API of a bare app without the gate (tests)."""
    return None


def key_id(record: KeyRecord | None) -> str | None:
    """Who owns what the caller creates (a stored response): its key's id, None without one."""
    return record.id if record is not None else None
