"""The worker's HTTP API (docs/model-runtime.md, "The worker"): `create_app(worker)` -> FastAPI app.

Bodies are read as bytes under --max-request-bytes (413 before the rest is read), parsed
by the engine's own models (400 invalid_request naming the field), and answered with the
`{error: {code, message}}` body on failure. Every answer of a POST surface, errors
included, carries `Server-Timing`. 429 answers carry Retry-After: 1, 503 Retry-After: 5.
Request text is never logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import yaml
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic.json_schema import models_json_schema

from app.runtime.schemas import (
    ClassifyRequest,
    ClassifyResult,
    EmbeddingsRequest,
    EmbeddingsResult,
    InvalidRequest,
    RuntimeFailure,
)
from app.srun.bundle import run_bundle
from app.srun.questions import DecisionRequest, DecisionResponse
from app.srun.schemas import (
    API_VERSION,
    BundleRequest,
    BundleResponse,
    HealthResponse,
    LiveResponse,
    ModelsResponse,
    RerankRequest,
    RerankResponse,
    WorkerErrorBody,
    WorkerErrorDetail,
)
from app.srun.timing import ServerTiming
from app.srun.worker import Worker, dumps, failure_status

log = logging.getLogger("svc_srun.server")
RETRY_AFTER = {429: "1", 503: "5"}


class RequestTooLarge(RuntimeFailure):
    status = 413
    code = "request_too_large"


SURFACES: dict[str, tuple[str, Any, Any]] = {
    # path: (surface, request model, response model)
    "/v1/decisions": ("decisions", DecisionRequest, DecisionResponse),
    "/v1/systemone": ("decisions", DecisionRequest, DecisionResponse),
    "/v1/classify": ("classify", ClassifyRequest, ClassifyResult),
    "/v1/embeddings": ("embeddings", EmbeddingsRequest, EmbeddingsResult),
    "/v1/rerank": ("rerank", RerankRequest, RerankResponse),
    "/v1/bundle": ("bundle", BundleRequest, BundleResponse),
}


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def failure_body(exc: BaseException) -> tuple[int, bytes]:
    status, code, message = failure_status(exc)
    detail = WorkerErrorDetail(
        code=code, message=message, reason=getattr(exc, "reason", None), limit=getattr(exc, "limit", None)
    )
    return status, dumps(WorkerErrorBody(error=detail).to_wire())


class SurfaceAnswers:
    """Answers the POST surfaces: body under the size limit, JSON, the worker (or a bundle of
    its tasks), and the spec's error body with Server-Timing on every answer."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def __call__(self, request: Request, path: str) -> Response:
        timing = ServerTiming()
        headers: dict[str, str] = {}
        status = 200
        try:
            content = await self._answer(request, SURFACES[path][0], timing)
        except Exception as exc:  # every failure gets the spec's body, never a bare 500
            if not isinstance(exc, RuntimeFailure):
                log.exception("%s failed", path)
            status, content = failure_body(exc)
            if status in RETRY_AFTER:
                headers["Retry-After"] = RETRY_AFTER[status]
        headers["Server-Timing"] = timing.header()
        metrics = self.worker.metrics
        metrics.requests.labels(path, str(status)).inc()
        metrics.duration.labels(path).observe(timing.total_ms() / 1000.0)
        return Response(content, status_code=status, media_type="application/json", headers=headers)

    async def _answer(self, request: Request, surface: str, timing: ServerTiming) -> bytes:
        started = time.perf_counter()
        body = _parse_json(await read_body(request, self.worker.settings.max_request_bytes))
        timing.add("parse", (time.perf_counter() - started) * 1000.0)
        if surface == "bundle":
            answer_dict, cached = await self._bundle(body, timing), None
        else:
            answer_dict, cached = await self.worker.handle(surface, body, timing)
        started = time.perf_counter()
        content = cached if cached is not None else dumps(answer_dict)
        timing.add("serialize", (time.perf_counter() - started) * 1000.0)
        return content

    async def _bundle(self, body: Any, timing: ServerTiming) -> dict[str, Any]:
        if isinstance(body, dict) and isinstance(body.get("tasks"), list):
            self.worker.metrics.bundle_tasks.observe(len(body["tasks"]))
        result = await run_bundle(
            body, self.worker.handle, failure_status, self.worker.settings.max_bundle_tasks, timing
        )
        return result.to_wire()


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"body: not valid JSON ({exc.__class__.__name__})") from None


def create_app(worker: Worker, *, load_on_startup: bool = True) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if load_on_startup and worker.state == "starting":
            worker.start_loading()
        yield
        await worker.aclose()

    app = FastAPI(
        title="svc-srun worker",
        version=API_VERSION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    _add_surface_routes(app, SurfaceAnswers(worker))
    _add_state_routes(app, worker)
    _add_error_handlers(app)
    return app


def _add_surface_routes(app: FastAPI, answers: SurfaceAnswers) -> None:
    def route(path: str) -> Any:
        async def endpoint(request: Request) -> Response:
            return await answers(request, path)

        return endpoint

    for path, (_, req_model, resp_model) in SURFACES.items():
        app.add_api_route(
            path,
            route(path),
            methods=["POST"],
            name=path.rsplit("/", 1)[-1],
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{req_model.__name__}"}}
                    },
                },
                "responses": _responses(resp_model),
            },
        )


def _add_state_routes(app: FastAPI, worker: Worker) -> None:
    """Models, health, metrics and the worker's own OpenAPI document."""

    @app.get("/v1/models", responses=_responses(ModelsResponse, errors=False))
    async def models() -> Response:
        return Response(dumps(worker.models().to_wire()), media_type="application/json")

    @app.get("/health", responses=_responses(HealthResponse, errors=False))
    async def health() -> Response:
        state = worker.health()
        return Response(
            dumps(state.to_wire()),
            status_code=200 if state.status == "ready" else 503,
            media_type="application/json",
        )

    @app.get("/health/live", responses=_responses(LiveResponse, errors=False))
    async def live() -> Response:
        return Response(dumps(LiveResponse().to_wire()), media_type="application/json")

    @app.get("/metrics")
    async def metrics_text() -> Response:
        return Response(worker.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/openapi.yaml")
    async def openapi_yaml() -> Response:
        return Response(yaml.safe_dump(openapi_document(app), sort_keys=False), media_type="application/yaml")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(404)
    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(_error("not_found", f"no route {request.url.path}"), 404)

    @app.exception_handler(405)
    async def not_allowed(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(_error("method_not_allowed", f"{request.method} not allowed"), 405)


def _error(code: str, message: str) -> dict[str, Any]:
    return WorkerErrorBody(error=WorkerErrorDetail(code=code, message=message)).to_wire()


def _responses(model: Any, errors: bool = True) -> dict[Any, Any]:
    ref = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
    out: dict[Any, Any] = {"200": {"description": "OK", **ref}}
    if errors:
        err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/WorkerErrorBody"}}}}
        for status, text in (
            ("400", "invalid_request"),
            ("404", "model_not_found"),
            ("413", "request_too_large"),
            ("422", "unsupported_surface"),
            ("429", "overloaded (Retry-After: 1)"),
            ("503", "not_ready (Retry-After: 5)"),
        ):
            out[status] = {"description": text, **err}
    return out


_MODELS = (
    DecisionRequest,
    DecisionResponse,
    ClassifyRequest,
    ClassifyResult,
    EmbeddingsRequest,
    EmbeddingsResult,
    RerankRequest,
    RerankResponse,
    BundleRequest,
    BundleResponse,
    ModelsResponse,
    HealthResponse,
    LiveResponse,
    WorkerErrorBody,
)


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The worker contract: routes from FastAPI, bodies from the pydantic wire models."""
    doc = get_openapi(
        title="svc-srun worker",
        version=API_VERSION,
        routes=app.routes,
        description="svc-sr model-runtime worker API",
    )
    doc["info"]["x-api-version"] = API_VERSION
    _, defs = models_json_schema(
        [(m, "validation") for m in _MODELS], ref_template="#/components/schemas/{model}"
    )
    doc.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
    return doc
