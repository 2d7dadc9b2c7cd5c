"""The data plane's API keys (docs/security.md "Keys and budgets"):

    POST   /api/v1/keys        {"name", "models", "budget"?, "team"?, "rate_limit"?} -> 201 {"id", "key", ...}
    GET    /api/v1/keys        every key, with its spend, never a secret       keys.read
    GET    /api/v1/keys/{id}   one key, with its spend                          keys.read
    DELETE /api/v1/keys/{id}   revoke: 401 on every replica within cache_seconds keys.manage

The secret is in the 201 answer only: the store keeps its SHA-256. Each mutation is audited
(`key.create`, `key.revoke`, never the secret). A store that does not answer: 503, nothing
written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import Enum
from typing import Literal, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.common.api_docs import json_body
from app.common.mgmt_errors import invalid_input, not_found, unavailable
from app.config.global_config import Budget, RateLimitRule
from app.keys.gate import KeyGate, SpendView
from app.keys.records import KeyRecord, KeySpec
from app.management.routes.common import (
    Registrar,
    Responses,
    json_response,
    mgmt_errors,
    read_model,
    record_mutation,
)
from app.management.service import Management
from app.state.shared_store import StoreUnavailable

log = logging.getLogger("svc_sr.keys")
PREFIX = "/api/v1/keys"
TAGS: list[str | Enum] = ["keys"]
UNAVAILABLE: Responses = mgmt_errors({503: "SERVICE_UNAVAILABLE: the key store does not answer"})
UNKNOWN: Responses = mgmt_errors({404: "NOT_FOUND: no such key"})
T = TypeVar("T")


class KeyView(BaseModel):
    id: str
    object: Literal["api_key"] = "api_key"
    name: str
    models: list[str]
    budget: Budget | None = None
    team: str | None = None
    rate_limit: RateLimitRule | None = None
    created_at: str
    spend: list[SpendView] = []


class KeyIssued(KeyView):
    key: str  # the secret, shown this once


class KeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[KeyView]


class KeyRevoked(BaseModel):
    id: str
    object: Literal["api_key.deleted"] = "api_key.deleted"
    deleted: bool = True


async def _store(call: Callable[[], T]) -> T:
    try:
        return await asyncio.to_thread(call)
    except StoreUnavailable as exc:
        raise unavailable(f"key store unavailable: {exc}") from None


class KeyEndpoints:
    """The route handlers (bound methods: FastAPI reads their parameters)."""

    def __init__(self, mgmt: Management, gate: KeyGate, configured: Callable[[], set[str]]) -> None:
        self.mgmt = mgmt
        self.gate = gate
        self.configured = configured  # the provider models a grant may name

    async def view(self, record: KeyRecord) -> KeyView:
        try:
            spend = await self.gate.spend_of(record)
        except Exception:  # a spend store that does not answer: the key without its spend
            log.exception("spend of key %s unavailable", record.id)
            spend = []
        return KeyView(spend=spend, **record.model_dump(exclude={"key_hash"}))

    async def create(self, request: Request) -> JSONResponse:
        spec = await read_model(KeySpec, request)
        unknown = sorted(set(spec.models) - self.configured())
        if unknown:
            raise invalid_input(f"models not configured: {unknown}", {"models": unknown})
        record, secret = await _store(lambda: self.gate.store.issue(spec))
        record_mutation(self.mgmt, "key.create", request, 201, key_id=record.id, name=record.name)
        view = await self.view(record)
        return json_response(KeyIssued(key=secret, **view.model_dump()), status=201)

    async def list_keys(self) -> JSONResponse:
        records = await _store(self.gate.store.records)
        return json_response(KeyList(data=[await self.view(r) for r in records]))

    async def read(self, key_id: str) -> JSONResponse:
        found = next((r for r in await _store(self.gate.store.records) if r.id == key_id), None)
        if found is None:
            raise not_found(f"no API key {key_id!r}")
        return json_response(await self.view(found))

    async def revoke(self, key_id: str, request: Request) -> JSONResponse:
        removed = await _store(lambda: self.gate.store.revoke(key_id))
        if removed is None:
            raise not_found(f"no API key {key_id!r}")
        record_mutation(self.mgmt, "key.revoke", request, 200, key_id=key_id, name=removed.name)
        return json_response(KeyRevoked(id=key_id))


def key_routes(mgmt: Management, gate: KeyGate, configured: Callable[[], set[str]]) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add
    ep = KeyEndpoints(mgmt, gate, configured)
    add(
        PREFIX,
        ep.create,
        "POST",
        "keys.manage",
        "secret",  # the answer holds the key's secret
        response_model=KeyIssued,
        status_code=201,
        responses=UNAVAILABLE,
        tags=TAGS,
        openapi_extra=json_body(KeySpec),
    )
    add(PREFIX, ep.list_keys, "GET", "keys.read", response_model=KeyList, responses=UNAVAILABLE, tags=TAGS)
    one = {**UNAVAILABLE, **UNKNOWN}
    add(PREFIX + "/{key_id}", ep.read, "GET", "keys.read", response_model=KeyView, responses=one, tags=TAGS)
    add(
        PREFIX + "/{key_id}",
        ep.revoke,
        "DELETE",
        "keys.manage",
        response_model=KeyRevoked,
        responses=one,
        tags=TAGS,
    )
    return router
