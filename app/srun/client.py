"""An async HTTP client for one svc-srun worker, over a Unix socket or TCP.

Calls return the parsed JSON body and raise `RuntimeCallError` (status, code, message,
retry_after) for error answers. Transport failures and 503 not_ready answers are retried
with a short back-off until the call's deadline, so a caller rides over a worker restart
by its supervisor; 429 `overloaded` is not retried by the client (`spread_overload` tries another
replica once, for callers that have one). Each call
records the router's `svc_model_runtime_*` samples, including transport time (total less
the worker's Server-Timing total) and the worker's phases.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from app.srun.runtime_metrics import REPLICA_OUTCOMES, RuntimeMetrics, request_outcome
from app.srun.timing import parse_server_timing

DEFAULT_TIMEOUT_S = 45.0
RETRY_STEP_S = 0.05
RETRY_MAX_STEP_S = 0.5
PHASES = ("parse", "tokenize", "queue", "forward", "post", "serialize")
_TRANSPORT_ERRORS = (
    httpx.ConnectError,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.PoolTimeout,
    httpx.ConnectTimeout,
)


class RuntimeCallError(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[type[RuntimeCallError], tuple[int, str, str, float | None]]:
        # Crosses process boundaries (a Ray replica's error reaches the Ingress pickled).
        return (RuntimeCallError, (self.status, self.code, self.message, self.retry_after))

    @property
    def outcome(self) -> str:
        return request_outcome(self.status, self.code)


T = TypeVar("T")


async def spread_overload(
    first: SrunClient,
    other: Callable[[SrunClient], SrunClient | None] | None,
    call: Callable[[SrunClient], Awaitable[T]],
) -> T:
    """`call(first)`; when that worker answers 429 `overloaded`, `call` once more on another
    replica (`other(first)`) before the 429 is passed back (none when there is no other)."""
    try:
        return await call(first)
    except RuntimeCallError as exc:
        second = other(first) if other is not None and exc.status == 429 else None
        if second is None:
            raise
        return await call(second)


class SrunClient:
    def __init__(
        self,
        *,
        uds: str | None = None,
        base_url: str | None = None,
        deployment: str = "default",
        replica: str = "0",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        metrics: RuntimeMetrics | None = None,
    ) -> None:
        if (uds is None) == (base_url is None):
            raise ValueError("give exactly one of uds or base_url")
        transport = httpx.AsyncHTTPTransport(uds=uds) if uds else None
        self.target = uds or base_url or ""
        self.deployment = deployment
        self.replica = replica
        self.timeout_s = timeout_s
        self.metrics = metrics or RuntimeMetrics()
        self._http = httpx.AsyncClient(
            base_url=base_url or "http://srun",
            transport=transport,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> SrunClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- surfaces ------------------------------------------------------------------------

    async def decisions(self, body: dict[str, Any], deadline_s: float | None = None) -> dict[str, Any]:
        return await self.call("POST", "/v1/decisions", body, surface="decisions", deadline_s=deadline_s)

    async def classify(self, body: dict[str, Any], deadline_s: float | None = None) -> dict[str, Any]:
        return await self.call("POST", "/v1/classify", body, surface="classify", deadline_s=deadline_s)

    async def embeddings(self, body: dict[str, Any], deadline_s: float | None = None) -> dict[str, Any]:
        return await self.call("POST", "/v1/embeddings", body, surface="embeddings", deadline_s=deadline_s)

    async def rerank(self, body: dict[str, Any], deadline_s: float | None = None) -> dict[str, Any]:
        return await self.call("POST", "/v1/rerank", body, surface="rerank", deadline_s=deadline_s)

    async def bundle(self, body: dict[str, Any], deadline_s: float | None = None) -> dict[str, Any]:
        return await self.call("POST", "/v1/bundle", body, surface="bundle", deadline_s=deadline_s)

    async def models(self) -> dict[str, Any]:
        return await self.call("GET", "/v1/models", surface="models")

    async def health(self) -> dict[str, Any]:
        """The /health body whatever its status (503 carries the state too)."""
        response = await self._http.get("/health", timeout=5.0)
        return response.json()

    async def ready(self) -> bool:
        try:
            return (await self.health()).get("status") == "ready"
        except (httpx.HTTPError, ValueError):
            return False

    # -- the call ------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        surface: str,
        deadline_s: float | None = None,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + (deadline_s if deadline_s is not None else self.timeout_s)
        started = time.perf_counter()
        m, dep, rep = self.metrics, self.deployment, self.replica
        # Serialized once: its size is what this call admits to the replica until it ends.
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        admitted = len(payload or b"")
        m.add("svc_model_runtime_replica_inflight", 1, deployment=dep, replica=rep)
        m.add("svc_model_runtime_replica_admitted_bytes", admitted, deployment=dep, replica=rep)
        outcome = "failed"
        try:
            response = await self._send(method, path, payload, deadline)
            elapsed = time.perf_counter() - started
            m.observe("svc_model_runtime_request_duration_seconds", elapsed, deployment=dep, surface=surface)
            timing = parse_server_timing(response.headers.get("server-timing"))
            if "total" in timing:
                m.observe(
                    "svc_model_runtime_transport_seconds",
                    max(0.0, elapsed - timing["total"] / 1000),
                    deployment=dep,
                    surface=surface,
                )
                for phase in PHASES:
                    m.observe(
                        "svc_model_runtime_server_seconds",
                        timing.get(phase, 0.0) / 1000,
                        deployment=dep,
                        surface=surface,
                        phase=phase,
                    )
            if response.status_code >= 400:
                raise _error(response)
            answer = _answer(response, m, dep)
            outcome = "ok"
            return answer
        except RuntimeCallError as exc:
            outcome = exc.outcome
            raise
        except asyncio.CancelledError:  # the caller's deadline ran out
            outcome = "canceled"
            raise
        finally:
            m.add("svc_model_runtime_replica_inflight", -1, deployment=dep, replica=rep)
            m.add("svc_model_runtime_replica_admitted_bytes", -admitted, deployment=dep, replica=rep)
            m.inc(
                "svc_model_runtime_requests_total",
                deployment=dep,
                outcome="timeout" if outcome == "canceled" else outcome,
            )
            m.inc(
                "svc_model_runtime_replica_requests_total",
                deployment=dep,
                replica=rep,
                outcome=REPLICA_OUTCOMES.get(outcome, outcome),
            )

    async def _send(self, method: str, path: str, payload: bytes | None, deadline: float) -> httpx.Response:
        step = RETRY_STEP_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeCallError(504, "timeout", f"{self.target}{path}: no answer before the deadline")
            try:
                response = await self._http.request(
                    method,
                    path,
                    content=payload,
                    headers=_JSON if payload is not None else None,
                    timeout=left,
                )
            except httpx.ReadTimeout:
                raise RuntimeCallError(
                    504, "timeout", f"{self.target}{path}: no answer before the deadline"
                ) from None
            except _TRANSPORT_ERRORS as exc:
                last: Any = RuntimeCallError(503, "unavailable", f"{self.target}: {type(exc).__name__}")
            else:
                if response.status_code != 503:
                    return response
                last = response
            if deadline - time.monotonic() <= step:
                if isinstance(last, httpx.Response):
                    raise _error(last)
                raise last
            await asyncio.sleep(step)
            step = min(step * 2, RETRY_MAX_STEP_S)


_JSON = {"content-type": "application/json"}


def _answer(response: httpx.Response, metrics: RuntimeMetrics, deployment: str) -> dict[str, Any]:
    """A 2xx body as a JSON object; anything else is an answer the router cannot read
    (svc_model_runtime_unknown_answers_total{reason}) and fails the call."""
    try:
        answer = response.json()
    except ValueError:
        reason = "not_json"
    else:
        if isinstance(answer, dict):
            return answer
        reason = "not_an_object"
    metrics.inc("svc_model_runtime_unknown_answers_total", deployment=deployment, reason=reason)
    raise RuntimeCallError(502, "unknown_answer", f"{response.request.url.path}: answer is {reason}")


def _error(response: httpx.Response) -> RuntimeCallError:
    try:
        detail = response.json().get("error", {})
    except ValueError:
        detail = {}
    retry = response.headers.get("retry-after")
    return RuntimeCallError(
        response.status_code,
        str(detail.get("code", "error")),
        str(detail.get("message", response.reason_phrase)),
        float(retry) if retry and retry.replace(".", "", 1).isdigit() else None,
    )
