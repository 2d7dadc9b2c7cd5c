"""Configuration changes (config.write, If-Match required): PATCH and PUT /api/v1/config,
POST /api/v1/config/rollback. Each is audited with the status it answered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from app.common.api_docs import NON_BLANK, REF_TEMPLATE, json_body
from app.common.mgmt_errors import MgmtError, MgmtErrorBody, not_found, unavailable
from app.common.redaction import restore_redacted
from app.management.activation import (
    PreconditionFailed,
    RestartRequired,
    has_if_match,
    if_match_required,
)
from app.management.documents import (
    CheckedDocument,
    DocumentRejected,
    check_document,
    merge_patch,
    parse_body,
)
from app.management.routes.common import (
    Registrar,
    Responses,
    json_or_yaml_openapi,
    json_response,
    mgmt_errors,
    principal_of,
    read_model,
    reasons_of,
    record_mutation,
    rejected,
    request_id,
)
from app.management.schemas import MutationResponse, RollbackRequest
from app.management.service import Management
from app.management.state import VersionRecord

Builder = Callable[[dict[str, Any]], CheckedDocument]
UNDOCUMENTED = Header(None, alias="If-Match", include_in_schema=False)  # documented as IF_MATCH

MUTATION_RESPONSES: Responses = {
    200: {"description": "persisted and active", "model": MutationResponse},
    202: {"description": "persisted; activation pending or superseded", "model": MutationResponse},
    **mgmt_errors(
        {
            400: "INVALID_INPUT, or INVALID_CONFIG with every reason in details.reasons",
            409: "RESTART_REQUIRED: a change only a restart applies (nothing persisted)",
            412: "CONFIG_CHANGED: If-Match is not the current ETag (the ETag header is)",
            428: "PRECONDITION_REQUIRED: If-Match missing or blank",
        }
    ),
    503: {
        "description": "status activation_failed (persisted, previous generation serving), or "
        "ACTIVATION_UNAVAILABLE / STORE_UNAVAILABLE (nothing persisted)",
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"$ref": REF_TEMPLATE.format(model=MutationResponse.__name__)},
                        {"$ref": REF_TEMPLATE.format(model=MgmtErrorBody.__name__)},
                    ]
                }
            }
        },
    },
}
# Required by the contract; the handler reads it itself to answer 428 (not 400) without it.
IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "required": True,
    "description": "the current ETag (GET /api/v1/config)",
    "schema": {"type": "string", "pattern": NON_BLANK},
}


def with_if_match(extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, "parameters": [IF_MATCH]}


def config_write_routes(mgmt: Management) -> APIRouter:
    router = APIRouter()
    add = Registrar(router, mgmt).add

    async def patch_config(request: Request, if_match: str | None = UNDOCUMENTED) -> JSONResponse:
        require_if_match(mgmt, request, "config.patch", if_match)
        return await write_config(mgmt, request, if_match, merge=True)

    async def put_config(request: Request, if_match: str | None = UNDOCUMENTED) -> JSONResponse:
        require_if_match(mgmt, request, "config.put", if_match)
        return await write_config(mgmt, request, if_match, merge=False)

    async def rollback(request: Request, if_match: str | None = UNDOCUMENTED) -> JSONResponse:
        require_if_match(mgmt, request, "config.rollback", if_match)
        record = await rollback_target(mgmt, request)
        document = record.document
        return await mutate(
            mgmt,
            request,
            "config.rollback",
            "rollback",
            lambda _current: check_document(document),
            if_match,
            rollback_of=record.version,
        )

    add(
        "/api/v1/config",
        patch_config,
        "PATCH",
        "config.write",
        "secret",
        responses=MUTATION_RESPONSES,
        summary="merge-patch, validate, persist, hot-reload",
        openapi_extra=with_if_match(json_or_yaml_openapi("JSON merge patch (RFC 7386) of the document")),
    )
    add(
        "/api/v1/config",
        put_config,
        "PUT",
        "config.write",
        "secret",
        responses=MUTATION_RESPONSES,
        summary="replace, validate, persist, hot-reload",
        openapi_extra=with_if_match(
            json_or_yaml_openapi("the configuration document (schema: GET /api/v1/config/schema)")
        ),
    )
    add(
        "/api/v1/config/rollback",
        rollback,
        "POST",
        "config.write",
        "sensitive",
        responses={**MUTATION_RESPONSES, **mgmt_errors({404: "NOT_FOUND: no such version in the history"})},
        summary="re-activate a recorded version",
        openapi_extra=with_if_match(json_body(RollbackRequest)),
    )
    return router


def require_if_match(mgmt: Management, request: Request, action: str, if_match: str | None) -> None:
    """428 first, before the body or the resource is read (the contract's order: a missing
    If-Match is answered as such, not as a 400, 404 or 409 it would have hidden). Whether it
    names the current document is checked under the write lock (`mutate`)."""
    if not has_if_match(if_match):
        record_mutation(mgmt, action, request, 428)
        raise precondition_error(if_match_required(mgmt.activation.etag))


def precondition_error(exc: PreconditionFailed) -> MgmtError:
    return MgmtError(exc.status, exc.message, code=exc.code, headers={"ETag": exc.current_etag})


def builder(submitted: Any, merge: bool) -> Builder:
    """The candidate from the persisted document current at activation time."""

    def build(current: dict[str, Any]) -> CheckedDocument:
        restored = restore_redacted(submitted, current)
        return check_document(merge_patch(current, restored) if merge else restored)

    return build


async def write_config(
    mgmt: Management, request: Request, if_match: str | None, *, merge: bool
) -> JSONResponse:
    action, source = ("config.patch", "api.patch") if merge else ("config.put", "api.put")
    try:
        body = parse_body(await request.body())
    except DocumentRejected as exc:
        record_mutation(mgmt, action, request, 400)
        raise rejected(exc) from None
    return await mutate(mgmt, request, action, source, builder(body, merge=merge), if_match)


async def rollback_target(mgmt: Management, request: Request) -> VersionRecord:
    """The recorded version the body names (400 and 404 audited)."""
    try:
        body = await read_model(RollbackRequest, request)
    except MgmtError:
        record_mutation(mgmt, "config.rollback", request, 400)
        raise
    if body.config_version is not None:
        record = mgmt.store.find(config_version=body.config_version)
    elif isinstance(body.version, int):
        record = mgmt.store.find(config_version=body.version)
    else:
        record = mgmt.store.find(version=body.version)
    if record is None:
        record_mutation(mgmt, "config.rollback", request, 404)
        raise not_found("no such version in the configuration history")
    return record


async def mutate(
    mgmt: Management,
    request: Request,
    action: str,
    source: str,
    build: Builder,
    if_match: str | None,
    rollback_of: str | None = None,
) -> JSONResponse:
    """Persist and activate; the audit entry records the answered status (500 if none)."""
    status = 500
    try:
        if not mgmt.has_registry:
            raise unavailable(
                "configuration changes are not available in this process (no activator: "
                "the router replicas cannot be reached from here)",
                code="ACTIVATION_UNAVAILABLE",
            )
        try:
            outcome = await mgmt.activation.mutate(
                if_match,
                build,
                source,
                request_id=request_id(request),
                role=principal_of(request).role,
                rollback_of=rollback_of,
            )
        except PreconditionFailed as exc:
            raise precondition_error(exc) from None
        except DocumentRejected as exc:
            raise rejected(exc) from None
        except RestartRequired as exc:
            raise MgmtError(
                409,
                f"restart required: {exc}",
                code="RESTART_REQUIRED",
                details={"reasons": reasons_of(exc.reasons)},
            ) from None
        status, body = mgmt.mutation_response(outcome, rollback_of)
        return json_response(body, status, headers={"ETag": mgmt.activation.etag})
    except MgmtError as exc:
        status = exc.status
        raise
    finally:
        record_mutation(mgmt, action, request, status)
