"""The worker without HTTP: which models it serves, their load state, admission (queues),
batching, the result cache, and one method per surface. `server.py` adds transport;
unit tests and bundles call these methods directly.

Loading runs in a background thread so /health can say `loading` / `warming` meanwhile.
A failed load is retried after `load_retry_seconds`, doubling, capped at 300 s, up to
`load_attempts` in total; a model that is missing (`ModelNotFound`), asked for an engine or
device it cannot use (`InvalidRequest`) or fails its self-check (`NotReady`) is `failed` at
once, as the contract's state table says for damaged packages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from app.runtime.batching import BatchedModel, BatchStats, MicroBatcher
from app.runtime.schemas import (
    ClassifyRequest,
    EmbeddingsRequest,
    InvalidRequest,
    ModelNotFound,
    NotReady,
    RuntimeFailure,
    Timings,
    UnsupportedSurface,
    parse_request,
)
from app.srun import catalog
from app.srun.admission import admit, licence_of
from app.srun.cache import ResultCache
from app.srun.catalog import Loaded, Reranker
from app.srun.cross_encoder import CrossEncoderReranker
from app.srun.decisions import DecisionModel
from app.srun.metrics import WorkerMetrics
from app.srun.schemas import (
    HealthResponse,
    ModelEntry,
    ModelHealth,
    ModelsResponse,
    ProcessLimits,
    WorkerCard,
)
from app.srun.timing import ServerTiming

log = logging.getLogger("svc_srun.worker")
MAX_LOAD_WAIT_S = 300.0


class WorkerSettings(BaseModel):
    """What `svc-srun run` was started with (docs/model-runtime.md, "The worker")."""

    models: list[ModelEntry] = Field(min_length=1)
    device: str = "auto"
    engine: str = "auto"
    profile: str = "exact"
    max_queue: int = Field(default=256, ge=1)
    max_queued_tokens: int = Field(default=4_194_304, ge=1)
    batch_window_ms: float = Field(default=2.0, ge=0)
    max_batch_tokens: int = Field(default=65_536, ge=1)
    max_request_bytes: int = Field(default=8_388_608, ge=1)
    max_bundle_tasks: int = Field(default=64, ge=1)
    load_attempts: int = Field(default=5, ge=1)
    load_retry_seconds: float = Field(default=5.0, ge=0)
    result_cache_entries: int = Field(default=16_384, ge=0)
    # Checked before each load (app/srun/admission.py); a models-file entry's family and
    # memory_budget_gib take precedence.
    family: str | None = None
    memory_budget_gib: float | None = Field(default=None, gt=0)
    accepted_licences: list[str] = Field(default_factory=list)


class _ObservedBatcher(MicroBatcher[Any, Any]):
    """A MicroBatcher that reports each batch's rows and tokens to the metrics."""

    def __init__(self, fn: Any, observe: Callable[[int, int], None], **options: Any) -> None:
        super().__init__(fn, **options)
        self._observe = observe

    async def _execute(self, batch: list[Any]) -> None:
        self._observe(len(batch), sum(row.tokens for row in batch))
        await super()._execute(batch)


@dataclass
class Slot:
    """One served model: its entry, load state and host."""

    entry: ModelEntry
    served: str
    status: str = "starting"
    message: str | None = None
    attempts: int = 0
    model: Loaded | None = None
    batched: BatchedModel | None = None
    batcher: MicroBatcher[Any, Any] | None = None
    card: WorkerCard | None = None
    aliases: set[str] = field(default_factory=set)

    def surfaces(self) -> list[str]:
        return list(self.card.surfaces) if self.card is not None else []


Loader = Callable[[str, str, str], Loaded]


def model_ref(name: str, revision: str | None) -> str:
    """What the loader is given for a model entry: a hub repository's pin picks its snapshot
    (the card's revision is then that commit); built-ins and local directories load by name
    and have the pin checked after (`Worker._check_revision`)."""
    if revision and not catalog.is_builtin(name) and not Path(name).expanduser().is_dir():
        return f"{name}@{revision}"
    return name


def resolve_device(device: str | None) -> str:
    device = (device or "auto").strip().lower()
    return "cpu" if device == "auto" else device


class Worker:
    def __init__(self, settings: WorkerSettings, loader: Loader | None = None) -> None:
        self.settings = settings
        # Warm-up runs in `_load` so /health can report `warming` meanwhile.
        self.loader = loader or (lambda name, engine, device: catalog.load(name, engine, device, warm=False))
        self.metrics = WorkerMetrics()
        self.cache = ResultCache(settings.result_cache_entries)
        self.slots: list[Slot] = []
        for entry in settings.models:
            name, _, pin = entry.model.partition("@")
            if pin and not entry.revision:
                entry = entry.model_copy(update={"model": name, "revision": pin})
            self.slots.append(Slot(entry=entry, served=entry.name or name))
        self.state = "starting"
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.metrics.on_scrape(self._refresh_metrics)

    # -- loading -------------------------------------------------------------------------

    def start_loading(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self.state = "loading"
        self._thread = threading.Thread(target=self._load_all, name="srun-loader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def wait_loaded(self, timeout_s: float = 60.0) -> bool:
        if self._thread is None:
            return False
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def load_now(self) -> None:
        """Load synchronously (tests and in-process hosts)."""
        self.state = "loading"
        self._load_all()

    def _load_all(self) -> None:
        for slot in self.slots:
            self._load(slot)

    def _load(self, slot: Slot) -> None:
        entry = slot.entry
        name = entry.model.partition("@")[0]
        wait = self.settings.load_retry_seconds
        while not self._stop.is_set():
            slot.attempts += 1
            slot.status, slot.message = "loading", None
            engine, device = (
                entry.engine or self.settings.engine,
                resolve_device(entry.device or self.settings.device),
            )
            ref = model_ref(name, entry.revision)
            try:
                admit(
                    ref,
                    engine,
                    device,
                    family=entry.family or self.settings.family,
                    memory_budget_gib=entry.memory_budget_gib or self.settings.memory_budget_gib,
                    accepted_licences=self.settings.accepted_licences,
                )
                model = self.loader(ref, engine, device)
                self._check_revision(model, entry.revision)
                slot.status = "warming"
                _warm(model)
                self._host(slot, model)
                slot.status = "ready"
                log.info("model %s ready (attempt %d)", slot.served, slot.attempts)
                return
            except (ModelNotFound, InvalidRequest, NotReady) as exc:
                slot.status, slot.message = "failed", exc.message
                log.error("model %s failed: %s", slot.served, exc.message)
                return
            except Exception as exc:  # transient: retried with back-off
                slot.message = f"{type(exc).__name__}: {exc}"
                if slot.attempts >= self.settings.load_attempts:
                    slot.status = "failed"
                    log.error(
                        "model %s failed after %d attempts: %s", slot.served, slot.attempts, slot.message
                    )
                    return
                log.warning("model %s load failed (%s); retrying in %.1f s", slot.served, slot.message, wait)
                if self._stop.wait(wait):
                    return
                wait = min(wait * 2, MAX_LOAD_WAIT_S)

    @staticmethod
    def _check_revision(model: Loaded, revision: str | None) -> None:
        """A pin must match what loaded: the card's revision, or a prefix (>= 7) of its digest."""
        if not revision:
            return
        card = catalog.card_of(model)
        digest = (card.digest or "").removeprefix("sha256:")
        if revision == card.revision or (len(revision) >= 7 and digest.startswith(revision.lower())):
            return
        raise NotReady(
            f"revision {revision!r} does not match the installed artifacts ({card.revision}, {card.digest})"
        )

    def _host(self, slot: Slot, model: Loaded) -> None:
        card = catalog.card_of(model).model_copy()
        card.profile = slot.entry.profile or self.settings.profile
        card.served_name = slot.served if slot.served != card.name else None
        card.status = "ready"
        card.licence = licence_of(card.name)
        if isinstance(model, DecisionModel | Reranker | CrossEncoderReranker):
            model.card = card
        options = {
            "window_ms": self.settings.batch_window_ms,
            "max_batch_tokens": self.settings.max_batch_tokens,
            "max_queue": self.settings.max_queue,
            "max_queued_tokens": self.settings.max_queued_tokens,
        }

        def observe(rows: int, tokens: int) -> None:
            self.metrics.batch_rows.labels(slot.served).observe(rows)
            self.metrics.batch_tokens.labels(slot.served).observe(tokens)

        batcher = _ObservedBatcher(model.forward, observe, **options)
        if isinstance(model, DecisionModel | Reranker | CrossEncoderReranker):
            slot.batcher = batcher
        else:
            slot.batched = BatchedModel(model)
            slot.batched.batcher = batcher
        slot.aliases = {slot.served, card.name, *(k for k, v in catalog.ALIASES.items() if v == card.name)}
        from app.runtime.registry import ALIASES as RUNTIME_ALIASES

        slot.aliases |= {k for k, v in RUNTIME_ALIASES.items() if v == card.name}
        slot.card = card
        slot.model = model
        self.metrics.info.labels(
            slot.served, card.task, card.engine or "", card.device, card.revision or ""
        ).set(1)
        self.metrics.memory.labels(slot.served).set(_artifact_bytes(card))

    # -- state ---------------------------------------------------------------------------

    def health(self) -> HealthResponse:
        states = [s.status for s in self.slots]
        if self.state == "starting":
            status = "starting"
        elif all(s == "ready" for s in states):
            status = "ready"
        elif all(s == "failed" for s in states):
            status = "failed"
        elif any(s in ("loading", "starting") for s in states):
            status = "loading"
        elif any(s == "warming" for s in states):
            status = "warming"
        else:
            status = "degraded"  # some ready, some failed
        return HealthResponse(
            status=status,
            models={
                s.served: ModelHealth(status=s.status, message=s.message, attempts=s.attempts)
                for s in self.slots
            },
        )

    def models(self) -> ModelsResponse:
        cards = []
        for slot in self.slots:
            if slot.card is not None:
                card = slot.card
            else:
                try:
                    base = next(
                        c
                        for c in catalog.catalogue()
                        if c.name == catalog.canonical(slot.entry.model.partition("@")[0])
                    )
                    card = base.model_copy()
                except (ModelNotFound, StopIteration):
                    card = WorkerCard(
                        name=slot.served,
                        description="unknown model",
                        task="unknown",
                        surfaces=[],
                        limits={
                            "max_input_tokens": 0,
                            "max_scan_tokens": 0,
                            "truncate_tokens": 0,
                            "max_chars_per_token": 0,
                        },
                    )
                card.served_name = slot.served if slot.served != card.name else None
                card.status, card.status_message = slot.status, slot.message
            cards.append(card)
        s = self.settings
        return ModelsResponse(
            data=cards,
            accepted_licences=list(s.accepted_licences),
            process_limits=ProcessLimits(
                max_bundle_tasks=s.max_bundle_tasks,
                max_request_bytes=s.max_request_bytes,
                max_queue=s.max_queue,
                max_queued_tokens=s.max_queued_tokens,
                max_batch_tokens=s.max_batch_tokens,
            ),
        )

    def _refresh_metrics(self) -> None:
        for slot in self.slots:
            self.metrics.ready.labels(slot.served).set(1 if slot.status == "ready" else 0)
            batcher = slot.batcher or (slot.batched.batcher if slot.batched else None)
            self.metrics.queue_depth.labels(slot.served).set(batcher.queued_requests if batcher else 0)

    # -- dispatch ------------------------------------------------------------------------

    def slot_for(self, name: Any, surface: str) -> Slot:
        """The slot answering `surface` for `name` (None: the only model serving it).
        404 model_not_found, 422 unsupported_surface, 503 not_ready."""
        if name is not None and not isinstance(name, str):
            raise InvalidRequest("model: must be a string")
        if name is None:
            serving = (
                self.slots if len(self.slots) == 1 else [s for s in self.slots if surface in s.surfaces()]
            )
            if len(serving) != 1:
                raise InvalidRequest("model: required when the process serves several models")
            slot = serving[0]
        else:
            slot = self._named_slot(name)
        if slot.status != "ready" or slot.model is None:
            raise NotReady(
                f"model {slot.served!r} is {slot.status}" + (f": {slot.message}" if slot.message else "")
            )
        if surface not in slot.surfaces():
            raise UnsupportedSurface(
                f"model {slot.served!r} serves {', '.join(slot.surfaces())}, not {surface}"
            )
        return slot

    def _named_slot(self, name: str) -> Slot:
        """The slot serving `name` (served name, alias, or the catalog's name for it); 404 otherwise."""
        slot = next((s for s in self.slots if name in s.aliases or name == s.served), None)
        if slot is None:
            try:
                canonical: str | None = catalog.canonical(name)
            except ModelNotFound:
                canonical = None
            slot = next((s for s in self.slots if catalog_name(s) == canonical), None) if canonical else None
        if slot is None:
            raise ModelNotFound(
                f"model {name!r} is not served here; serving: {', '.join(s.served for s in self.slots)}"
            )
        return slot

    async def handle(
        self, surface: str, body: Any, timing: ServerTiming
    ) -> tuple[dict[str, Any], bytes | None]:
        """(answer dict, or None with cached JSON bytes) for one task; raises RuntimeFailure."""
        if not isinstance(body, dict):
            raise InvalidRequest("body: must be a JSON object")
        slot = self.slot_for(body.get("model"), surface)
        key = self.cache.key(surface, slot.served, body)
        cached = self.cache.get(key)
        if key is not None and self.cache.entries:
            self.metrics.cache.labels(slot.served, "hit" if cached is not None else "miss").inc()
        if cached is not None:
            return {}, cached
        timings = Timings()
        answer = await self._run(slot, surface, body, timings)
        timing.absorb(timings)
        self.metrics.queue.labels(slot.served).observe(timings.queue_ms / 1000.0)
        self.metrics.forward.labels(slot.served).observe(timings.forward_ms / 1000.0)
        if key is not None and self.cache.entries:
            self.cache.put(key, dumps(answer))
        return answer, None

    async def _run(self, slot: Slot, surface: str, body: dict[str, Any], timings: Timings) -> dict[str, Any]:
        model = slot.model
        if isinstance(model, DecisionModel | Reranker | CrossEncoderReranker):
            encode = self._encoder(slot, timings)
            if isinstance(model, DecisionModel):
                return (await model.decide(body, encode, timings)).to_wire()
            return (await model.rerank(body, encode, timings)).to_wire()
        assert slot.batched is not None
        if surface == "classify":
            req = parse_request(ClassifyRequest, body)
            result: Any = await slot.batched.classify(req.input, req.options)
        else:
            ereq = parse_request(EmbeddingsRequest, body)
            result = await slot.batched.embed(ereq.input, ereq.options, ereq.dimensions, ereq.layer)
        t = result.timings
        timings.tokenize_ms, timings.queue_ms, timings.forward_ms, timings.post_ms = (
            t.tokenize_ms,
            t.queue_ms,
            t.forward_ms,
            t.post_ms,
        )
        wire = result.to_wire()
        if slot.served != result.model:
            wire["model"] = slot.served
        return wire

    def _encoder(self, slot: Slot, timings: Timings) -> Callable[[list[Any]], Any]:
        """The slot's batcher as `encode(items)`: texts, or a cross-encoder's (query, passage)
        pairs, each estimated at a token per 4 characters."""
        batcher = slot.batcher
        assert batcher is not None

        def tokens(item: str | tuple[str, str]) -> int:
            chars = len(item) if isinstance(item, str) else sum(map(len, item))
            return max(1, chars // 4 + 2)

        async def encode(texts: list[Any]) -> list[Any]:
            stats = BatchStats()
            rows = await batcher.submit_many(texts, [tokens(t) for t in texts], stats)
            timings.queue_ms += stats.queue_ms
            timings.forward_ms += stats.forward_ms
            return rows

        return encode

    async def aclose(self) -> None:
        self.stop()
        for slot in self.slots:
            if slot.batcher is not None:
                await slot.batcher.aclose()
            if slot.batched is not None:
                await slot.batched.aclose()


def _warm(model: Loaded) -> None:
    """Pay first-pass costs (new input shapes) at load, not on a request."""
    warm = getattr(model, "warm_up", None)
    if warm is not None:
        warm()
        return
    encoder = getattr(model, "encoder", None)
    if encoder is not None and hasattr(encoder, "warm_up"):
        encoder.warm_up()


def catalog_name(slot: Slot) -> str | None:
    return slot.card.name if slot.card is not None else None


def dumps(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()


def _artifact_bytes(card: WorkerCard) -> int:
    """Bytes of the files the model loaded (the registry lists them; shared files count per model)."""
    from app.runtime import registry

    try:
        spec = registry.BUILTINS.get(card.name) or catalog.SPECS[card.name]
        return sum(
            f.stat().st_size for _, _, files in spec.artifacts(card.engine or "onnxruntime") for f in files
        )
    except (KeyError, OSError, ImportError):
        return 0


def failure_status(exc: BaseException) -> tuple[int, str, str]:
    if isinstance(exc, RuntimeFailure):
        return exc.status, exc.code, exc.message
    return 500, "internal_error", f"{type(exc).__name__}"
