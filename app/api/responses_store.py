"""The Responses API store on the data plane: GET|DELETE /v1/responses/{id},
GET /v1/responses/{id}/input_items, and the store `previous_response_id` reads.

Settings: `global.services.response_api` {enabled (true), store_backend (auto), ttl_seconds
(86400), max_responses (1000)}, read from the live configuration on every call.
`store_backend: auto` keeps responses in the management store's Redis when there is one
(GraphArgs.management_store / SVC_SR_MANAGEMENT_STORE_URL: every Ingress replica on every node
can read and continue them), else in the replica's memory (app/exchange/responses/store.py).

A store that is down never fails an answer: a response it cannot keep is logged and answered
as usual. Reading from it fails only what needs it: a retrieval, a deletion, a continuation
(503 `response_store_unavailable`, Retry-After 1), never a request without
`previous_response_id`. With the store disabled, these routes answer 404
`response_store_disabled` and `previous_response_id` 400.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field, ValidationError

from app.api.dataplane import ConfigView
from app.api.key_access import Caller, key_id
from app.common.api_docs import errors
from app.common.errors import ErrorBody, SvcError
from app.config.global_config import ResponseApiConfig
from app.exchange.openai_schemas import ResponseObject
from app.exchange.responses.store import MemoryResponseRecordStore, ResponseRecordStore
from app.exchange.responses.stored import ConversationStore, StoredResponse
from app.state.shared_store import StoreUnavailable

log = logging.getLogger("svc_sr.responses_store")


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]] = Field(
        description="input items: message, function_call, function_call_output"
    )
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


def store_unavailable(what: str) -> SvcError:
    return SvcError(
        503,
        f"the Response API store is unavailable ({what}); retry later",
        "service_unavailable_error",
        "response_store_unavailable",
        headers={"Retry-After": "1"},
    )


def response_not_found(response_id: str) -> SvcError:
    return SvcError(
        404, f"Response with id '{response_id}' not found.", "invalid_request_error", "response_not_found"
    )


class ResponseStoreService:
    """The store as the data plane uses it: the backend `store_backend` names (`shared`: the
    management store's Redis backend, None without one), the live settings, the degradation."""

    def __init__(self, config: ConfigView, shared: ResponseRecordStore | None = None) -> None:
        self._config = config
        self._shared = shared
        self._local = MemoryResponseRecordStore()
        self._warned = False

    def settings(self) -> ResponseApiConfig:
        return self._config.current().global_.services.response_api

    def backend(self) -> ResponseRecordStore:
        wanted = self.settings().store_backend
        if wanted == "memory" or self._shared is None:
            if wanted == "redis" and not self._warned:
                self._warned = True
                log.warning("response_api.store_backend is redis but the management store is not: memory")
            return self._local
        return self._shared

    def for_request(self) -> ConversationStore | None:
        """What a POST /v1/responses keeps and continues with (None: the store is disabled)."""
        return self if self.settings().enabled else None

    def _enabled(self, response_id: str) -> None:
        if not self.settings().enabled:
            raise SvcError(
                404,
                f"Response with id '{response_id}' not found: the Response API store is disabled "
                "(global.services.response_api.enabled)",
                "invalid_request_error",
                "response_store_disabled",
            )

    async def get(self, response_id: str) -> StoredResponse | None:
        try:
            return await self.backend().get(response_id)
        except StoreUnavailable as exc:
            log.warning("%s", exc)
            raise store_unavailable("read") from None
        except ValidationError as exc:  # a record another version wrote: as good as gone
            log.warning("stored response %s cannot be read back: %s", response_id, exc)
            return None

    async def put(self, record: StoredResponse) -> None:
        settings = self.settings()
        try:
            await self.backend().put(record, settings.ttl_seconds, settings.max_responses)
        except StoreUnavailable as exc:
            log.warning("response %s answered but not stored: %s", record.id, exc)

    async def delete(self, response_id: str) -> bool:
        try:
            return await self.backend().delete(response_id)
        except StoreUnavailable as exc:
            log.warning("%s", exc)
            raise store_unavailable("delete") from None

    async def stored(self, response_id: str, owner: str | None) -> StoredResponse:
        """The response `owner` (the caller's key id, None: none) created; another's is 404,
        as if absent (docs/security.md "Keys and budgets")."""
        self._enabled(response_id)
        record = await self.get(response_id)
        if record is None or record.owner != owner:
            raise response_not_found(response_id)
        return record


_STATUSES = {
    401: "authentication_error (missing_api_key, invalid_api_key): a listener requires API keys",
    404: "response_not_found (unknown or expired), response_store_disabled",
    429: "RATE_LIMIT_EXCEEDED (Retry-After)",
    503: "response_store_unavailable: the store did not answer (Retry-After)",
}
_ERRORS = errors(ErrorBody, _STATUSES)
_LIST_ERRORS = errors(ErrorBody, {400: "invalid query (limit, order)", **_STATUSES})


def responses_store_router(store: ResponseStoreService, caller: Caller) -> APIRouter:
    """`caller`: the API-key gate's dependency (app/api/key_access.py)."""
    router = APIRouter(tags=["inference"])

    @router.get("/v1/responses/{response_id}", response_model=ResponseObject, responses=_ERRORS)
    async def retrieve(response_id: str, request: Request) -> dict[str, Any]:
        return (await store.stored(response_id, key_id(await caller(request)))).response

    @router.delete("/v1/responses/{response_id}", response_model=ResponseDeleted, responses=_ERRORS)
    async def delete(response_id: str, request: Request) -> ResponseDeleted:
        await store.stored(
            response_id, key_id(await caller(request))
        )  # another key's response is not deleted: 404
        if not await store.delete(response_id):
            raise response_not_found(response_id)
        return ResponseDeleted(id=response_id)

    @router.get(
        "/v1/responses/{response_id}/input_items", response_model=InputItemList, responses=_LIST_ERRORS
    )
    async def input_items(
        response_id: str,
        request: Request,
        limit: int = Query(20, ge=1, le=100),
        order: Literal["asc", "desc"] = Query("desc"),
        after: str | None = Query(None, description="an item id: list the items after it"),
    ) -> InputItemList:
        items = list((await store.stored(response_id, key_id(await caller(request)))).input_items)
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item.get("id") for item in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        page = items[:limit]
        return InputItemList(
            data=page,
            first_id=page[0].get("id") if page else None,
            last_id=page[-1].get("id") if page else None,
            has_more=len(items) > limit,
        )

    return router
