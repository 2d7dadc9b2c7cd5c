"""The vLLM engine of one in-cluster model, and vLLM's own OpenAI server app over it.

Laid out like Ray Serve LLM's VLLMEngine: the engine client (AsyncLLM) runs in the
replica's process, and the requests go to the FastAPI app vLLM's `serve` command builds,
called in process (app/llm/asgi_call.py). The in-cluster model therefore answers exactly
what the same vLLM answers over HTTP (protocol, errors, usage, streaming), with no socket.

Runs only in the vLLM runtime's virtualenv: vllm is imported when the engine starts.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import subprocess
import types
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from app.llm.asgi_call import ASGIApp, ResponseHead, asgi_exchange
from app.llm.orphan_guard import start_guard

log = logging.getLogger("svc_sr.llm")

# Defaults for a CPU node where vLLM's own defaults would take the whole machine; a GPU
# node's engine_kwargs or environment override them.
CPU_ENV_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}


class EngineArgsError(ValueError):
    """engine_kwargs names an argument vLLM does not have."""


def _launchers() -> types.SimpleNamespace:
    """vLLM's server building blocks (vllm.entrypoints.launchers, vLLM 0.30 and later)."""
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args

    return types.SimpleNamespace(
        init_app_state=init_app_state,
        build_async_engine_client=build_async_engine_client,
        build_app=build_app,
        make_arg_parser=make_arg_parser,
        validate_parsed_serve_args=validate_parsed_serve_args,
    )


def server_args(
    parts: types.SimpleNamespace, model_source: str, model_id: str, engine_kwargs: Mapping[str, Any]
) -> argparse.Namespace:
    """`vllm serve MODEL` arguments: the parser's defaults with engine_kwargs set by their
    argument names (max_model_len, dtype, tensor_parallel_size, ...), as LLMConfig takes them."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = parts.make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(["--model", model_source])
    for key, value in engine_kwargs.items():
        name = key.replace("-", "_")
        if not hasattr(args, name):
            raise EngineArgsError(f"engine_kwargs.{key}: vLLM has no such engine argument")
        setattr(args, name, value)
    args.model = model_source
    args.served_model_name = [model_id]
    args.disable_uvicorn_access_log = True
    parts.validate_parsed_serve_args(args)
    return args


class VLLMEngine:
    """One model's engine: `start()` it once, then `exchange()` requests through vLLM's app."""

    def __init__(
        self, model_source: str, model_id: str, engine_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.model_source = model_source
        self.model_id = model_id
        self.engine_kwargs = dict(engine_kwargs or {})
        self._client_cm: AbstractAsyncContextManager[Any] | None = None
        self._guard: subprocess.Popen[bytes] | None = None
        self._client: Any = None
        self._app: ASGIApp | None = None

    @property
    def running(self) -> bool:
        return self._app is not None

    async def start(self) -> None:
        for key, value in CPU_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        # Before the engine's processes exist: a replica killed while they start leaves none.
        self._guard = start_guard()
        parts = _launchers()
        args = server_args(parts, self.model_source, self.model_id, self.engine_kwargs)
        self._client_cm = parts.build_async_engine_client(args)
        self._client = await self._client_cm.__aenter__()
        tasks = await self._client.get_supported_tasks()
        build_params = inspect.signature(parts.build_app).parameters
        app = (
            parts.build_app(args, tasks, self._client.model_config)
            if len(build_params) >= 3
            else parts.build_app(args)
        )
        init_params = inspect.signature(parts.init_app_state).parameters
        if "supported_tasks" in init_params:
            await parts.init_app_state(self._client, app.state, args, tasks)
        else:
            await parts.init_app_state(self._client, app.state, args)
        # vLLM's error handler flips `state.server.should_exit` (its uvicorn server); there is
        # none here, and Serve's health check replaces a dead engine's replica instead.
        app.state.server = types.SimpleNamespace()
        self._app = app
        log.info("vLLM engine for %s (%s) started", self.model_id, self.model_source)

    async def check_health(self) -> None:
        """Raises when the engine died (Serve then replaces the replica)."""
        if self._client is None:
            raise RuntimeError("vLLM engine not started")
        await self._client.check_health()

    def exchange(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> AsyncIterator[ResponseHead | bytes]:
        """vLLM's answer to one HTTP request: its head, then its body chunks."""
        if self._app is None:
            raise RuntimeError("vLLM engine not started")
        return asgi_exchange(self._app, method, path, headers, body)

    async def shutdown(self) -> None:
        if self._client_cm is not None:
            cm, self._client_cm, self._app = self._client_cm, None, None
            await cm.__aexit__(None, None, None)
        if self._guard is not None:
            self._guard.kill()  # the engine stopped cleanly: nothing left to watch
            self._guard.wait()
            self._guard = None
