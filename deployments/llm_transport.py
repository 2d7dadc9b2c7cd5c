"""The httpx transport of in-cluster models: a request to an `*.llm.svc-sr.internal` URL
(app/llm/addressing.py) becomes a streaming DeploymentHandle call to that model's LLMServer.

Mounted on the Ingress's upstream client, so the attempt loop treats an in-cluster model as
any backend: Ray's "no replica / replica died / queue full" surface as httpx connect errors
(retried, then the next candidate: the model's HTTP backend_refs), an engine that breaks
off mid-body as a read error, and closing the response cancels the replica's generator
(vLLM aborts the request).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from app.llm.addressing import IN_CLUSTER_PATTERN, deployment_of_host
from deployments.ray_compat import process_transport, wait_assigned

# How long a request may wait for a replica (the only one restarting queues it for the
# engine's whole start): after this its model's HTTP backend_refs take it, as after a refused
# connection (the upstream client's connect timeout is 10 s too).
DEFAULT_ASSIGN_TIMEOUT_S = 10.0


class _HandleStream(httpx.AsyncByteStream):
    def __init__(self, chunks: DeploymentResponseGenerator, request: httpx.Request) -> None:
        self._chunks = chunks
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._chunks:
                yield chunk
        except Exception as exc:  # the replica died or the engine raised mid-stream
            raise httpx.ReadError(
                f"in-cluster model failed: {type(exc).__name__}", request=self._request
            ) from exc

    async def aclose(self) -> None:
        self._chunks.cancel()


class ServeLLMTransport(httpx.AsyncBaseTransport):
    """Requests to in-cluster model URLs, answered by the LLMServer deployments of `app_name`."""

    def __init__(self, app_name: str, assign_timeout_s: float = DEFAULT_ASSIGN_TIMEOUT_S) -> None:
        self._app_name = app_name
        self._assign_timeout_s = assign_timeout_s
        self._handles: dict[str, DeploymentHandle] = {}

    def _handle(self, deployment: str) -> DeploymentHandle:
        handle = self._handles.get(deployment)
        if handle is None:
            handle = process_transport(serve.get_deployment_handle(deployment, self._app_name))
            self._handles[deployment] = handle
        return handle

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        deployment = deployment_of_host(request.url.host)
        if deployment is None:
            raise httpx.UnsupportedProtocol(f"{request.url.host} is not an in-cluster model", request=request)
        body = await request.aread()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers.raw}
        path = request.url.raw_path.decode("latin-1")
        try:
            chunks = cast(
                DeploymentResponseGenerator,
                self._handle(deployment)
                .options(stream=True)
                .exchange.remote(request.method, path, headers, body),
            )
            if not await wait_assigned(chunks, self._assign_timeout_s):
                raise httpx.ConnectError(f"{deployment}: no replica took the request", request=request)
            head: Any = await anext(chunks)
        except httpx.ConnectError:
            raise
        except StopAsyncIteration as exc:
            raise httpx.RemoteProtocolError(f"{deployment} answered nothing", request=request) from exc
        except Exception as exc:  # no replica, replica died, queue full, engine not started
            raise httpx.ConnectError(f"{deployment} failed: {type(exc).__name__}", request=request) from exc
        return httpx.Response(
            int(head["status"]),
            headers=head.get("headers") or {},
            stream=_HandleStream(chunks, request),
            request=request,
        )


def in_cluster_mounts(app_name: str) -> dict[str, httpx.AsyncBaseTransport]:
    """The upstream client's mounts for the in-cluster models of one Serve application."""
    return {IN_CLUSTER_PATTERN: ServeLLMTransport(app_name)}
