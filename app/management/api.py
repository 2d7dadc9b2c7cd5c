"""The management API (spec 1 "Management API"): one `Management` object holds the state,
`install(app, management)` mounts its routes on a FastAPI app.

Routes and the permission each needs (auth mode bearer; with mode none all are open):

    GET  /health                                     public (mounted by create_app)
    GET  /ready, /startup-status, /api/v1/status     ready.read
    GET  /api/v1, /openapi.json, /docs               any valid token
    GET  /api/v1/config[/schema|/versions|/hash]     config.read (secrets need secret_view)
    POST /api/v1/config/validate, /plan              config.read
    PATCH, PUT /api/v1/config; POST .../rollback     config.write (If-Match required)
    GET  /api/v1/observability/audit                 audit.read
    POST /api/v1/routing/preview                     classify.invoke
    GET  /api/v1/inventory/*, /info/*                inventory.read
    GET  /api/v1/observability/replays[/aggregate|/{id}]  observability.read (content needs data.read)
    POST /api/v1/observability/outcomes              learning.ingest

Every request body and answer is a pydantic model (models.py); failures use MgmtError.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import yaml
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ValidationError

from app.api.errors import REQUEST_ID_HEADER, validation_message
from app.config.models import RouterConfig
from app.config.schema import config_json_schema
from app.management.activation import (
    ActivationController,
    Activator,
    ConfigSink,
    NoopActivator,
    Outcome,
    PreconditionFailed,
    RestartRequired,
    compile_pipeline,
)
from app.management.audit import AuditLog, AuditPage
from app.management.auth import PERMISSIONS, Authenticator, AuthError, Principal, auth_issues
from app.management.discovery import RouteGuard, Sensitivity, describe_routes
from app.management.documents import (
    Candidate,
    DocumentRejected,
    Reason,
    candidate_of,
    check_document,
    diff,
    etag_of,
    merge_patch,
    parse_body,
    restart_required,
)
from app.management.errors import MgmtError, invalid_input, not_found, not_implemented, unavailable
from app.management.inventory import (
    InventoryBackend,
    LocalInventory,
    classifier_view,
    legacy_info_classifier,
    legacy_info_models,
)
from app.management.models import (
    Condition,
    Discovery,
    HashView,
    MutationResponse,
    PlanRequest,
    PlanResponse,
    PreviewRequest,
    PreviewResponse,
    RollbackRequest,
    StatusDocument,
    ValidateResponse,
    VersionEntry,
    VersionsResponse,
)
from app.management.openapi import UnknownOperation, narrow, to_openapi_30
from app.management.redaction import redact, restore_redacted
from app.management.replays import (
    IdempotencyConflict,
    OutcomeIn,
    OutcomeRecord,
    OutcomeStore,
    ReplayAggregate,
    ReplayPage,
    ReplaySource,
    redact_record,
)
from app.management.startup import StartupStatus, StartupTracker, completed_tracker
from app.management.state import ConfigStore

log = logging.getLogger("svc_sr.management")

PREVIEW_DEADLINE_S = 30.0
MAX_IDEMPOTENCY_KEY = 255


class RoutingPreviewer(Protocol):
    """RouterPipeline.preview, or the Router deployment handle's `preview` adapted."""

    async def preview(self, request: Mapping[str, Any], headers: Mapping[str, str] | None = None,
                      seed: int | None = None) -> dict[str, Any]: ...


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Management:
    """State behind the management routes; build one per process (per Ingress replica)."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        store: ConfigStore | None = None,
        activator: Activator | None = None,
        config_view: ConfigSink | None = None,
        startup: StartupTracker | None = None,
        audit: AuditLog | None = None,
        replays: ReplaySource | None = None,
        outcomes: OutcomeStore | None = None,
        previewer: RoutingPreviewer | None = None,
        inventory: InventoryBackend | None = None,
        filename: str = "config.yaml",
        environ: Mapping[str, str] | None = None,
        activation_wait_s: float = 60.0,
        compile_check: Callable[[RouterConfig], None] = compile_pipeline,
    ) -> None:
        self.instance_id = uuid.uuid4().hex
        self.store = store or ConfigStore()
        self.store.initialize(candidate_of(config), filename=filename)
        self.audit = audit or AuditLog()
        self.startup = startup or completed_tracker()
        self.replays = replays
        self.outcomes = outcomes or OutcomeStore()
        self.previewer = previewer
        self.inventory = inventory or LocalInventory(self.startup)
        # Without an activator nothing can reach the routers: status reads `unknown` and
        # mutations answer 503 instead of persisting a change that would never serve.
        self.has_registry = activator is not None
        self.environ = environ
        self.authenticator = Authenticator.from_config(config, environ)
        callbacks: list[Callable[[RouterConfig], None]] = [self._refresh_auth]
        if config_view is not None:
            callbacks.append(config_view.update)
        self.activation = ActivationController(
            self.store, self.audit, activator or NoopActivator(), config, on_active=callbacks,
            compile_check=compile_check, wait_s=activation_wait_s,
        )

    # ------------------------------------------------------------------ helpers
    @property
    def config(self) -> RouterConfig:
        return self.activation.active_config

    def _refresh_auth(self, config: RouterConfig) -> None:
        self.authenticator = Authenticator.from_config(config, self.environ if self.environ is not None else os.environ)

    def guard(self, permission: str | None, sensitivity: Sensitivity = "internal") -> RouteGuard:
        return RouteGuard(lambda: self.authenticator, permission, sensitivity, self._denied)

    def _denied(self, request: Request, exc: AuthError) -> None:
        # 401s are not recorded: an unauthenticated flood must not be able to rotate the ring.
        if exc.status == 403:
            self.audit.record("auth.denied", request_id=_request_id(request), method=request.method,
                              path=request.url.path, status=403, detail={"code": exc.code})

    def hash_view(self) -> dict[str, Any]:
        view = self.activation.hash_view()
        if not self.has_registry:
            view["activation_status"] = "unknown"
        return view

    def record_mutation(self, action: str, request: Request, status: int, **extra: Any) -> None:
        principal: Principal | None = getattr(request.state, "principal", None)
        self.audit.record(
            action, request_id=_request_id(request), method=request.method, path=request.url.path, status=status,
            principal=principal.name if principal else None, role=principal.role if principal else None,
            detail=extra or None,
        )

    # ------------------------------------------------------------------ status
    def status_document(self) -> StatusDocument:
        startup = self.startup.status()
        view = self.hash_view()
        conditions = [Condition(type="Live", status="True", reason="ProcessRunning")]
        if startup.phase == "complete":
            conditions.append(Condition(type="StartupComplete", status="True", reason="StartupComplete"))
        elif startup.phase == "error":
            conditions.append(Condition(type="StartupComplete", status="True", reason="StartupFailed"))
        elif startup.total_models == 0:
            conditions.append(Condition(type="StartupComplete", status="Unknown", reason="StartupUnobserved"))
        else:
            conditions.append(Condition(type="StartupComplete", status="False", reason="StartupIncomplete"))
        active = self.store.active
        conditions.append(Condition(type="ActiveConfigAvailable", status="True" if active else "False",
                                    reason="ActiveConfigAvailable" if active else "NoActiveConfig"))
        state = (view.get("activation") or {}).get("state")
        if not view.get("generated_runtime_hash") or not view.get("active_runtime_hash"):
            converged = Condition(type="ConfigConverged", status="Unknown", reason="ConfigIdentityUnobserved")
        elif view["generated_runtime_hash"] == view["active_runtime_hash"] and state in (None, "active"):
            converged = Condition(type="ConfigConverged", status="True", reason="ConfigHashesMatch")
        elif state == "failed":
            converged = Condition(type="ConfigConverged", status="False", reason="ConfigActivationFailed")
        elif state == "superseded":
            converged = Condition(type="ConfigConverged", status="False", reason="ConfigActivationSuperseded")
        else:
            converged = Condition(type="ConfigConverged", status="False", reason="ConfigActivationPending")
        conditions.append(converged)
        if startup.phase == "error":
            ready = Condition(type="Ready", status="False", reason="StartupFailed")
        elif startup.phase != "complete":
            ready = Condition(type="Ready", status="False", reason="StartupIncomplete")
        elif not active:
            ready = Condition(type="Ready", status="False", reason="NoActiveConfig")
        else:  # no known failure; dependency and quorum readiness are not observed here
            ready = Condition(type="Ready", status="Unknown", reason="RequiredDependenciesUnobserved")
        conditions.append(ready)
        return StatusDocument(instance_id=self.instance_id, observed_at=_now(), conditions=conditions)

    # ------------------------------------------------------------------ config
    def mutation_response(self, outcome: Outcome, rollback_of: str | None = None) -> tuple[int, MutationResponse]:
        attempt = outcome.attempt
        assert attempt is not None
        view = self.hash_view()
        status: Literal["active", "pending", "activation_failed", "superseded"]
        error = None
        if attempt.state == "active":
            code, status = 200, "active"
        elif attempt.state == "failed":
            code, status = 503, "activation_failed"
            reason = attempt.reasons[0] if attempt.reasons else None
            error = {"code": "ACTIVATION_FAILED", "message": (
                f"activation failed at stage {reason.stage}: {reason.message}" if reason else "activation failed"),
                "timestamp": _now()}
        elif attempt.state == "superseded":
            code, status = 202, "superseded"
        else:
            code, status = 202, "pending"
        body = MutationResponse(
            status=status, source_config_hash=view["source_config_hash"],
            generated_runtime_hash=view["generated_runtime_hash"], active_runtime_hash=view["active_runtime_hash"],
            activation_status=view["activation_status"], config_version=view["config_version"],
            version=attempt.version, etag=etag_of(attempt.document_hash), activation=attempt.view(),
            warnings=outcome.warnings, rollback_of=rollback_of, error=error,
        )
        return code, body


async def _maybe_await(value: Any) -> Any:
    """ReplaySource methods may be sync (ReplayStore) or async (a Ray deployment's handle)."""
    return await value if inspect.isawaitable(value) else value


def _request_id(request: Request) -> str:
    existing = getattr(request.state, "request_id", None)
    if existing:
        return existing
    value = request.headers.get(REQUEST_ID_HEADER) or uuid.uuid4().hex
    request.state.request_id = value
    return value


def _reasons(reasons: list[Reason]) -> list[dict[str, Any]]:
    return [r.as_dict() for r in reasons]


def _rejected(exc: DocumentRejected) -> MgmtError:
    first = exc.reasons[0] if exc.reasons else None
    message = "invalid configuration"
    if first is not None:
        message += f": {first.path + ': ' if first.path else ''}{first.message}"
        if len(exc.reasons) > 1:
            message += f" (and {len(exc.reasons) - 1} more)"
    return MgmtError(400, message, code="INVALID_CONFIG", details={"reasons": _reasons(exc.reasons)})


def _json(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status, headers=headers)


def _parse_model(model: type[BaseModel], raw: bytes) -> Any:
    if not raw.strip():
        raise invalid_input("request body is required")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        if any(e.get("type") == "json_invalid" for e in exc.errors()):
            raise invalid_input("request body is not valid JSON") from None
        message, _ = validation_message(exc.errors())
        raise invalid_input(message) from None


def _config_body(raw: bytes) -> dict[str, Any]:
    """A configuration document or merge patch as JSON or YAML text."""
    return parse_body(raw)


def _json_or_yaml_openapi(content: str = "configuration document (JSON or YAML)") -> dict[str, Any]:
    return {"requestBody": {"required": True, "description": content, "content": {
        "application/json": {"schema": {"type": "object"}},
        "application/yaml": {"schema": {"type": "string"}},
    }}}


ERRORS = {code: {"description": text} for code, text in (
    (400, "invalid input"), (401, "missing or invalid bearer token"), (403, "permission missing"),
)}


def management_router(mgmt: Management) -> APIRouter:
    router = APIRouter()

    def add(path: str, endpoint: Callable[..., Any], method: str, permission: str | None,
            sensitivity: Sensitivity = "internal", *, responses: dict[int | str, Any] | None = None,
            response_model: Any = None, summary: str | None = None, openapi_extra: dict[str, Any] | None = None,
            tags: list[str] | None = None, deprecated: bool = False) -> None:
        router.add_api_route(
            path, endpoint, methods=[method], dependencies=[Depends(mgmt.guard(permission, sensitivity))],
            responses={**ERRORS, **(responses or {})}, response_model=response_model, summary=summary,
            openapi_extra=openapi_extra, tags=tags or ["management"], deprecated=deprecated,
        )

    # ------------------------------------------------------------------ system
    async def ready() -> JSONResponse:
        status = mgmt.startup.status()
        return _json(status, 200 if status.ready else 503)

    async def startup_status() -> JSONResponse:
        return _json(mgmt.startup.status(detail=True))

    async def status() -> StatusDocument:
        return mgmt.status_document()

    add("/ready", ready, "GET", "ready.read", response_model=StartupStatus,
        responses={503: {"description": "startup not complete"}}, summary="readiness", tags=["system"])
    add("/startup-status", startup_status, "GET", "ready.read", response_model=StartupStatus,
        summary="startup progress", tags=["system"])
    add("/api/v1/status", status, "GET", "ready.read", response_model=StatusDocument,
        summary="replica-local status", tags=["system"])

    # ------------------------------------------------------------------ config reads
    def _config_headers() -> dict[str, str]:
        active = mgmt.store.active
        headers = {"ETag": mgmt.activation.etag}
        if active is not None:
            headers["x-svc-config-version"] = str(active.config_version)
            headers["x-svc-config-hash"] = active.source_hash
        return headers

    async def get_config(request: Request, format: Literal["json", "yaml"] = Query("json")) -> Response:
        principal: Principal = request.state.principal
        document = mgmt.store.document
        if not principal.can("secret_view"):
            document = redact(document)
        headers = _config_headers()
        if format == "yaml":
            text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
            return Response(text, media_type="application/yaml", headers=headers)
        return JSONResponse(document, headers=headers)

    add("/api/v1/config", get_config, "GET", "config.read", "secret",
        summary="persisted configuration document (ETag for If-Match)",
        responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}})

    async def get_schema(mode: Literal["full", "progressive"] = Query("full"),
                         section: str | None = Query(None, max_length=64)) -> JSONResponse:
        schema = config_json_schema()
        if section is not None:
            prop = schema.get("properties", {}).get(section)
            if prop is None:
                raise not_found(f"no configuration section {section!r}; sections: {sorted(schema['properties'])}")
            return JSONResponse({"$schema": schema["$schema"], "section": section, **prop, "$defs": schema["$defs"]})
        if mode == "progressive":
            summary = {}
            for name, prop in schema.get("properties", {}).items():
                summary[name] = {k: v for k, v in prop.items() if k in ("type", "title", "description", "default")}
                summary[name]["x-detail"] = f"/api/v1/config/schema?section={name}"
            return JSONResponse({k: v for k, v in schema.items() if k not in ("properties", "$defs")}
                                | {"properties": summary})
        return JSONResponse(schema)

    add("/api/v1/config/schema", get_schema, "GET", "config.read", summary="configuration JSON Schema",
        responses={404: {"description": "unknown section"}})

    async def validate(request: Request) -> ValidateResponse:
        try:
            candidate = check_document(_config_body(await request.body()))
            issues = auth_issues(candidate.config)
            if issues:
                raise DocumentRejected(issues)
        except DocumentRejected as exc:
            return ValidateResponse(valid=False, reasons=_reasons(exc.reasons))  # type: ignore[arg-type]
        restart = restart_required(mgmt.config, candidate.config)
        return ValidateResponse(
            valid=True, source_config_hash=candidate.source_hash, generated_runtime_hash=candidate.runtime_hash,
            document=candidate.document if request.state.principal.can("secret_view") else redact(candidate.document),
            warnings=candidate.warnings, reasons=_reasons(restart),  # type: ignore[arg-type]
            restart_required=bool(restart),
        )

    add("/api/v1/config/validate", validate, "POST", "config.read", "sensitive", response_model=ValidateResponse,
        summary="validate and normalize a document (no write)", openapi_extra=_json_or_yaml_openapi())

    async def plan(request: Request) -> PlanResponse:
        body: PlanRequest = _parse_model(PlanRequest, await request.body())
        current = mgmt.store.document
        submitted = restore_redacted(body.document, current)
        raw = merge_patch(current, submitted) if body.mode == "merge" else submitted
        etag = mgmt.activation.etag
        try:
            candidate = check_document(raw)
            issues = auth_issues(candidate.config)
            if issues:
                raise DocumentRejected(issues)
        except DocumentRejected as exc:
            return PlanResponse(mode=body.mode, valid=False, current_etag=etag, candidate_etag=None, changed=False,
                                reasons=_reasons(exc.reasons))  # type: ignore[arg-type]
        restart = restart_required(mgmt.config, candidate.config)
        changes = diff(current, candidate.document)
        if not request.state.principal.can("secret_view"):
            changes = redact(changes)
            changes = [_redact_change(c) for c in changes]
        return PlanResponse(
            mode=body.mode, valid=True, current_etag=etag, candidate_etag=etag_of(candidate.source_hash),
            changed=bool(changes), changes=changes, restart_required=bool(restart),  # type: ignore[arg-type]
            reasons=_reasons(restart), warnings=candidate.warnings,  # type: ignore[arg-type]
        )

    add("/api/v1/config/plan", plan, "POST", "config.read", "sensitive", response_model=PlanResponse,
        summary="plan a merge or replace (no write)",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": PlanRequest.model_json_schema()}}}})

    async def versions(limit: int = Query(10, ge=1, le=100)) -> VersionsResponse:
        active = mgmt.store.active
        records = mgmt.store.versions()
        entries = [
            VersionEntry(
                version=r.version, timestamp=r.timestamp, source=r.source, filename=r.filename,
                config_version=r.config_version, hash=r.hash, result=r.result, rollback_of=r.rollback_of,
                active=active is not None and r.version == active.version,
            )
            for r in records[:limit]
        ]
        return VersionsResponse(versions=entries, total=len(records), history_limit=mgmt.store.history_limit)

    add("/api/v1/config/versions", versions, "GET", "config.read", response_model=VersionsResponse,
        summary="persisted versions, newest first")

    async def hash_view() -> JSONResponse:
        return _json(HashView.model_validate(mgmt.hash_view()), headers={"ETag": mgmt.activation.etag})

    add("/api/v1/config/hash", hash_view, "GET", "config.read", response_model=HashView,
        summary="source, generated and active hashes")

    # ------------------------------------------------------------------ config mutations
    async def _mutate(request: Request, action: str, source: str, build: Callable[[dict[str, Any]], Candidate],
                      if_match: str | None, rollback_of: str | None = None) -> JSONResponse:
        principal: Principal = request.state.principal
        status = 500
        try:
            if not mgmt.has_registry:
                status = 503
                raise unavailable("configuration changes are not available in this process (no activator: "
                                  "the router replicas cannot be reached from here)", code="ACTIVATION_UNAVAILABLE")
            try:
                outcome = await mgmt.activation.mutate(
                    if_match, build, source, request_id=_request_id(request), role=principal.role,
                    rollback_of=rollback_of,
                )
            except PreconditionFailed as exc:
                status = exc.status
                raise MgmtError(exc.status, exc.message, code=exc.code, headers={"ETag": exc.current_etag}) from None
            except DocumentRejected as exc:
                status = 400
                raise _rejected(exc) from None
            except RestartRequired as exc:
                status = 409
                raise MgmtError(409, f"restart required: {exc}", code="RESTART_REQUIRED",
                                details={"reasons": _reasons(exc.reasons)}) from None
            status, body = mgmt.mutation_response(outcome, rollback_of)
            return _json(body, status, headers={"ETag": mgmt.activation.etag})
        finally:
            mgmt.record_mutation(action, request, status)

    def _builder(submitted: Any, merge: bool) -> Callable[[dict[str, Any]], Candidate]:
        def build(current: dict[str, Any]) -> Candidate:
            restored = restore_redacted(submitted, current)
            return check_document(merge_patch(current, restored) if merge else restored)
        return build

    mutation_responses: dict[int | str, Any] = {
        200: {"model": MutationResponse}, 202: {"description": "accepted; activation pending or superseded"},
        409: {"description": "RESTART_REQUIRED"}, 412: {"description": "stale If-Match (CONFIG_CHANGED)"},
        428: {"description": "If-Match missing (PRECONDITION_REQUIRED)"},
        503: {"description": "activation_failed", "model": MutationResponse},
    }

    async def _write_config(request: Request, if_match: str | None, *, merge: bool) -> JSONResponse:
        action, source = ("config.patch", "api.patch") if merge else ("config.put", "api.put")
        try:
            body = _config_body(await request.body())
        except DocumentRejected as exc:
            mgmt.record_mutation(action, request, 400)
            raise _rejected(exc) from None
        return await _mutate(request, action, source, _builder(body, merge=merge), if_match)

    async def patch_config(request: Request, if_match: str | None = Header(None)) -> JSONResponse:
        return await _write_config(request, if_match, merge=True)

    async def put_config(request: Request, if_match: str | None = Header(None)) -> JSONResponse:
        return await _write_config(request, if_match, merge=False)

    add("/api/v1/config", patch_config, "PATCH", "config.write", "secret", responses=mutation_responses,
        summary="merge-patch, validate, persist, hot-reload", openapi_extra=_json_or_yaml_openapi("JSON merge patch"))
    add("/api/v1/config", put_config, "PUT", "config.write", "secret", responses=mutation_responses,
        summary="replace, validate, persist, hot-reload", openapi_extra=_json_or_yaml_openapi())

    async def rollback(request: Request, if_match: str | None = Header(None)) -> JSONResponse:
        try:
            body: RollbackRequest = _parse_model(RollbackRequest, await request.body())
        except MgmtError:
            mgmt.record_mutation("config.rollback", request, 400)
            raise
        if body.config_version is not None:
            record = mgmt.store.find(config_version=body.config_version)
        elif isinstance(body.version, int):
            record = mgmt.store.find(config_version=body.version)
        else:
            record = mgmt.store.find(version=body.version)
        if record is None:
            mgmt.record_mutation("config.rollback", request, 404)
            raise not_found("no such version in the configuration history")
        document = record.document
        return await _mutate(request, "config.rollback", "rollback", lambda _current: check_document(document),
                             if_match, rollback_of=record.version)

    add("/api/v1/config/rollback", rollback, "POST", "config.write", "sensitive",
        responses={**mutation_responses, 404: {"description": "unknown version"}},
        summary="re-activate a recorded version",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": RollbackRequest.model_json_schema()}}}})

    # ------------------------------------------------------------------ audit
    async def audit(action: str | None = Query(None, max_length=128), limit: int = Query(100, ge=1, le=1000),
                    after_sequence: int = Query(0, ge=0)) -> AuditPage:
        return mgmt.audit.query(action=action, limit=limit, after_sequence=after_sequence)

    add("/api/v1/observability/audit", audit, "GET", "audit.read", "sensitive", response_model=AuditPage,
        summary="audit entries (hash-chained)")

    # ------------------------------------------------------------------ routing preview
    async def preview(request: Request) -> JSONResponse:
        body: PreviewRequest = _parse_model(PreviewRequest, await request.body())
        if mgmt.previewer is None:
            raise unavailable("routing preview is not available in this process")
        context = body.preview_context
        request_body = body.model_dump(exclude={"preview_context"}, exclude_none=True)
        headers = dict(context.headers) if context else {}
        if context and context.session_id:
            headers.setdefault("x-session-id", context.session_id)
        try:
            result = await asyncio.wait_for(
                mgmt.previewer.preview(request_body, headers, seed=context.seed if context else None),
                PREVIEW_DEADLINE_S)
        except TimeoutError:
            raise MgmtError(408, f"routing preview took longer than {PREVIEW_DEADLINE_S:.0f} s",
                            code="TIMEOUT_ERROR") from None
        except MgmtError:
            raise
        except Exception as exc:
            status = getattr(exc, "status", None)
            if isinstance(status, int) and 400 <= status < 500:  # the request itself (unknown model, bad body)
                raise MgmtError(status, str(exc), code="INVALID_INPUT") from None
            log.exception("routing preview failed")
            raise MgmtError(500, f"routing preview failed: {type(exc).__name__}", code="PREVIEW_ERROR") from None
        result = dict(result)
        result.setdefault("selection_provenance", "preview")
        result["backend_calls"] = 0
        result["persisted"] = False
        if not request.state.principal.can("secret_view"):
            result = redact(result)
        return _json(PreviewResponse.model_validate(result))

    add("/api/v1/routing/preview", preview, "POST", "classify.invoke", "sensitive", response_model=PreviewResponse,
        responses={408: {"description": "deadline"}, 503: {"description": "preview unavailable"}},
        summary="evaluate signals, decision and model selection without calling a backend",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": {"type": "object", "required": ["messages"], "properties": {
                "model": {"type": "string"}, "messages": {"type": "array", "items": {"type": "object"}},
                "preview_context": {"type": "object"}}}}}}})

    # ------------------------------------------------------------------ inventory
    async def inv_models() -> JSONResponse:
        return JSONResponse({"models": await mgmt.inventory.models()})

    async def inv_classifier(request: Request) -> JSONResponse:
        view = classifier_view(mgmt.config)
        return JSONResponse(view if request.state.principal.can("secret_view") else redact(view))

    async def inv_embeddings() -> JSONResponse:
        return JSONResponse({"models": await mgmt.inventory.embedding_models()})

    async def inv_runtime() -> JSONResponse:
        return JSONResponse({"deployments": await mgmt.inventory.model_runtime()})

    add("/api/v1/inventory/models", inv_models, "GET", "inventory.read", summary="prepared task bindings")
    add("/api/v1/inventory/classifier", inv_classifier, "GET", "inventory.read", "sensitive",
        summary="classifier configuration")
    add("/api/v1/inventory/embedding-models", inv_embeddings, "GET", "inventory.read", summary="embedding models")
    add("/api/v1/inventory/model-runtime", inv_runtime, "GET", "inventory.read",
        summary="model deployments: process, readiness, cards")

    async def info_models() -> JSONResponse:
        return JSONResponse(legacy_info_models(await mgmt.inventory.models(), mgmt.config))

    async def info_classifier() -> JSONResponse:
        return JSONResponse(legacy_info_classifier(mgmt.config))

    async def classification_metrics() -> Response:
        raise not_implemented("classification metrics are not implemented on the older path; "
                              "see GET /metrics on the metrics port")

    add("/info/models", info_models, "GET", "inventory.read", summary="older model info", tags=["older"],
        deprecated=True)
    add("/info/classifier", info_classifier, "GET", "inventory.read", summary="older classifier info",
        tags=["older"], deprecated=True)
    add("/metrics/classification", classification_metrics, "GET", "inventory.read", tags=["older"],
        responses={501: {"description": "NOT_IMPLEMENTED"}}, deprecated=True)

    # ------------------------------------------------------------------ replays and outcomes
    def _replays() -> ReplaySource:
        if mgmt.replays is None:
            raise unavailable("replay recording is not enabled (router_replay plugin)")
        return mgmt.replays

    async def list_replays(request: Request, limit: int = Query(100, ge=1, le=1000),
                           after_sequence: int = Query(0, ge=0), decision: str | None = Query(None, max_length=256),
                           model: str | None = Query(None, max_length=256)) -> JSONResponse:
        page: ReplayPage = await _maybe_await(_replays().list(limit=limit, after_sequence=after_sequence,
                                                              decision=decision, model=model))
        principal: Principal = request.state.principal
        page.records = [redact_record(r, data=principal.can("data.read"), secrets=principal.can("secret_view"))
                        for r in page.records]
        return _json(page)

    async def aggregate(decision: str | None = Query(None, max_length=256),
                        model: str | None = Query(None, max_length=256)) -> ReplayAggregate:
        return await _maybe_await(_replays().aggregate(decision=decision, model=model))

    async def get_replay(request: Request, replay_id: str) -> JSONResponse:
        record = await _maybe_await(_replays().get(replay_id))
        if record is None:
            raise not_found(f"no replay record {replay_id!r}")
        principal: Principal = request.state.principal
        return JSONResponse(redact_record(record, data=principal.can("data.read"),
                                          secrets=principal.can("secret_view")))

    replay_503 = {503: {"description": "replays not enabled"}}
    add("/api/v1/observability/replays", list_replays, "GET", "observability.read", "sensitive",
        response_model=ReplayPage, responses=replay_503, summary="replay records")
    add("/api/v1/observability/replays/aggregate", aggregate, "GET", "observability.read",
        response_model=ReplayAggregate, responses=replay_503, summary="routing and cost aggregates")
    add("/api/v1/observability/replays/{replay_id}", get_replay, "GET", "observability.read", "sensitive",
        responses={**replay_503, 404: {"description": "unknown id"}}, summary="one replay record")

    async def outcomes(request: Request, idempotency_key: str | None = Header(None)) -> JSONResponse:
        status = 500
        try:
            if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
                status = 400
                raise invalid_input(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
            try:
                body: OutcomeIn = _parse_model(OutcomeIn, await request.body())
            except MgmtError:
                status = 400
                raise
            if mgmt.replays is not None and await _maybe_await(mgmt.replays.get(body.replay_id)) is None:
                status = 404
                raise not_found(f"no replay record {body.replay_id!r}")
            principal: Principal = request.state.principal
            try:
                record: OutcomeRecord = mgmt.outcomes.submit(body, principal.name, idempotency_key)
            except IdempotencyConflict:
                status = 409
                raise MgmtError(409, "this Idempotency-Key was used with a different body",
                                code="IDEMPOTENCY_CONFLICT") from None
            status = 200 if record.idempotent_replay else 201
            return _json(record, status)
        finally:
            mgmt.record_mutation("outcome.submit", request, status)

    add("/api/v1/observability/outcomes", outcomes, "POST", "learning.ingest", "sensitive",
        response_model=OutcomeRecord, summary="submit an outcome for a replay",
        responses={201: {"model": OutcomeRecord}, 404: {"description": "unknown replay"},
                   409: {"description": "Idempotency-Key reused with another body"}},
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": OutcomeIn.model_json_schema()}}}})
    return router


def _redact_change(change: dict[str, Any]) -> dict[str, Any]:
    from app.management.redaction import REDACTED, is_secret_key

    leaf = str(change.get("path", "")).rsplit(".", 1)[-1]
    if is_secret_key(leaf) or ".extra_headers." in f".{change.get('path', '')}.":
        return {k: (REDACTED if k in ("before", "after") else v) for k, v in change.items()}
    return change


def install(app: FastAPI, mgmt: Management) -> None:
    """Mount the management routes, discovery, /openapi.json (3.0, narrowable) and /docs on `app`.

    The app must be created with openapi_url=None and docs_url=None (these routes replace them)."""
    app.include_router(management_router(mgmt))
    app.state.management = mgmt
    any_token = mgmt.guard(None, "internal")

    async def discovery() -> Discovery:
        return Discovery(auth_mode="bearer" if mgmt.authenticator.enabled else "none",
                         permissions=PERMISSIONS, routes=describe_routes(app))  # type: ignore[arg-type]

    async def openapi(path: str | None = Query(None, max_length=512),
                      method: str | None = Query(None, max_length=16)) -> JSONResponse:
        document = _openapi_30(app)
        try:
            return JSONResponse(narrow(document, path, method))
        except UnknownOperation as exc:
            raise not_found(str(exc)) from None

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} management API")

    for path, endpoint, model in (("/api/v1", discovery, Discovery), ("/openapi.json", openapi, None),
                                  ("/docs", docs, None)):
        app.add_api_route(path, endpoint, methods=["GET"], dependencies=[Depends(any_token)], response_model=model,
                          include_in_schema=path == "/api/v1", tags=["system"], responses=dict(ERRORS))


def _openapi_30(app: FastAPI) -> dict[str, Any]:
    cached = getattr(app.state, "openapi_30", None)
    if cached is None:
        cached = to_openapi_30(app.openapi())
        app.state.openapi_30 = cached
    return cached
