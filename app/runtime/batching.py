"""An asyncio micro-batcher for hosts without `@serve.batch` (the standalone `svc-srun` worker),
and `BatchedModel`, which runs a `RuntimeModel`'s forward phase through it.

Rows from concurrent requests are collected until the first waiting row is `window_ms` old,
or the batch holds `max_batch_items` rows or `max_batch_tokens` tokens, then run in one call.
One batch runs at a time: on a CPU replica a second concurrent forward only competes for the
same cores, and while a batch runs the next one fills up, so batches grow with load.

Admission (the contract's limits: 256 requests, 4,194,304 tokens per model): a request that would
take the queue past `max_queue` waiting requests or `max_queued_tokens` waiting tokens is
refused at once with `Overloaded` (hosts answer 429, Retry-After: 1) instead of waiting.
A request's rows are admitted together or not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from app.runtime.engine import Prepared, RuntimeModel
from app.runtime.schemas import ClassifyResult, EmbeddingsResult, Overloaded

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_WINDOW_MS = 2.0
DEFAULT_MAX_BATCH_ITEMS = 64
DEFAULT_MAX_BATCH_TOKENS = 65_536
DEFAULT_MAX_QUEUE = 256
DEFAULT_MAX_QUEUED_TOKENS = 4_194_304


@dataclass
class BatchStats:
    """Filled in for one `submit_many` call: the Server-Timing `queue` and `forward` phases."""

    queue_ms: float = 0.0  # longest wait of the request's rows before their forward began
    forward_ms: float = 0.0  # time of the forwards its rows rode in (summed over batches)
    batches: int = 0


@dataclass
class _Request:
    remaining: int
    stats: BatchStats
    started: set[int] = field(default_factory=set)  # ids of batches already counted


@dataclass
class _Row:
    item: Any
    tokens: int
    future: asyncio.Future[Any]
    request: _Request
    enqueued: float


class MicroBatcher(Generic[T, R]):
    """`fn(items) -> results` (same length and order; sync functions run in a worker thread so
    the event loop keeps admitting requests, coroutine functions are awaited)."""

    def __init__(
        self,
        fn: Callable[[list[T]], Sequence[R]] | Callable[[list[T]], Awaitable[Sequence[R]]],
        *,
        window_ms: float = DEFAULT_WINDOW_MS,
        max_batch_items: int = DEFAULT_MAX_BATCH_ITEMS,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        max_queue: int = DEFAULT_MAX_QUEUE,
        max_queued_tokens: int = DEFAULT_MAX_QUEUED_TOKENS,
    ) -> None:
        if (
            window_ms < 0
            or max_batch_items < 1
            or max_batch_tokens < 1
            or max_queue < 1
            or max_queued_tokens < 1
        ):
            raise ValueError("window_ms must be >= 0 and every limit >= 1")
        self._fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)
        self.window_s = window_ms / 1000.0
        self.max_batch_items = max_batch_items
        self.max_batch_tokens = max_batch_tokens
        self.max_queue = max_queue
        self.max_queued_tokens = max_queued_tokens
        self._rows: deque[_Row] = deque()
        self._queued_requests = 0
        self._queued_tokens = 0
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        # Counters for metrics (svc_srun_batch_rows / _tokens) and tests.
        self.batches = 0
        self.rows = 0
        self.largest_batch = 0
        self.rejected = 0

    @property
    def queued_requests(self) -> int:
        return self._queued_requests

    @property
    def queued_tokens(self) -> int:
        return self._queued_tokens

    async def submit(self, item: T, tokens: int = 1) -> R:
        return (await self.submit_many([item], [tokens]))[0]

    async def submit_many(
        self, items: Sequence[T], tokens: Sequence[int] | None = None, stats: BatchStats | None = None
    ) -> list[R]:
        """Results in order. Raises Overloaded when the queue is full, or what `fn` raised."""
        if not items:
            return []
        costs = [max(1, int(t)) for t in tokens] if tokens is not None else [1] * len(items)
        if len(costs) != len(items):
            raise ValueError("tokens must have one entry per item")
        total = sum(costs)
        if self._queued_requests + 1 > self.max_queue or self._queued_tokens + total > self.max_queued_tokens:
            self.rejected += 1
            raise Overloaded(
                f"queue full: {self._queued_requests} requests / {self._queued_tokens} tokens waiting "
                f"(limits {self.max_queue} / {self.max_queued_tokens})"
            )
        loop = asyncio.get_running_loop()
        self._ensure_worker(loop)
        request = _Request(remaining=len(items), stats=stats or BatchStats())
        now = time.perf_counter()
        futures = []
        for item, cost in zip(items, costs, strict=True):
            future: asyncio.Future[Any] = loop.create_future()
            self._rows.append(_Row(item, cost, future, request, now))
            futures.append(future)
        self._queued_requests += 1
        self._queued_tokens += total
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for future in futures:  # rows not started yet are dropped by the worker
                future.cancel()
            raise

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        while self._rows:
            row = self._rows.popleft()
            if not row.future.done():
                row.future.set_exception(Overloaded("batcher closed"))
            self._release(row)

    # -- worker ----------------------------------------------------------------------------

    def _ensure_worker(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._worker is not None and not self._worker.done() and self._worker.get_loop() is loop:
            return
        # First use, or a new event loop (tests, a restarted host): start over on this one.
        self._wakeup = asyncio.Event()
        self._worker = loop.create_task(self._run(), name="micro-batcher")

    def _release(self, row: _Row) -> None:
        self._queued_tokens -= row.tokens
        row.request.remaining -= 1
        if row.request.remaining == 0:
            self._queued_requests -= 1

    async def _run(self) -> None:
        assert self._wakeup is not None
        wakeup = self._wakeup
        while True:
            self._drop_cancelled()
            if not self._rows:
                wakeup.clear()
                await wakeup.wait()
                continue
            deadline = self._rows[0].enqueued + self.window_s
            while not self._full():
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                wakeup.clear()
                try:
                    await asyncio.wait_for(wakeup.wait(), remaining)
                except TimeoutError:
                    break
            batch = self._take()
            if batch:
                await self._execute(batch)

    def _drop_cancelled(self) -> None:
        kept: deque[_Row] = deque()
        while self._rows:
            row = self._rows.popleft()
            if row.future.done():
                self._release(row)
            else:
                kept.append(row)
        self._rows = kept

    def _full(self) -> bool:
        tokens = 0
        for count, row in enumerate(self._rows, start=1):
            tokens += row.tokens
            if count >= self.max_batch_items or tokens >= self.max_batch_tokens:
                return True
        return False

    def _take(self) -> list[_Row]:
        batch: list[_Row] = []
        tokens = 0
        while self._rows and len(batch) < self.max_batch_items:
            row = self._rows[0]
            if row.future.done():
                self._rows.popleft()
                self._release(row)
                continue
            # A row bigger than the token cap still runs, alone.
            if batch and tokens + row.tokens > self.max_batch_tokens:
                break
            self._rows.popleft()
            self._release(row)
            batch.append(row)
            tokens += row.tokens
        return batch

    async def _execute(self, batch: list[_Row]) -> None:
        started = time.perf_counter()
        batch_id = self.batches
        self.batches += 1
        self.rows += len(batch)
        self.largest_batch = max(self.largest_batch, len(batch))
        items = [row.item for row in batch]
        try:
            produced: Sequence[Any]
            if self._is_async:
                produced = await cast(Callable[[list[Any]], Awaitable[Sequence[Any]]], self._fn)(items)
            else:
                produced = await asyncio.to_thread(
                    cast(Callable[[list[Any]], Sequence[Any]], self._fn), items
                )
            results = list(produced)
            if len(results) != len(batch):
                raise RuntimeError(f"batch function returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # the callers get the failure; the worker lives on
            for row in batch:
                if not row.future.done():
                    row.future.set_exception(exc)
            return
        elapsed = (time.perf_counter() - started) * 1000.0
        for row, result in zip(batch, results, strict=True):
            stats = row.request.stats
            stats.queue_ms = max(stats.queue_ms, (started - row.enqueued) * 1000.0)
            if batch_id not in row.request.started:
                row.request.started.add(batch_id)
                stats.forward_ms += elapsed
                stats.batches += 1
            if not row.future.done():
                row.future.set_result(result)


class BatchedModel:
    """A `RuntimeModel` whose forward phase runs through a `MicroBatcher`, so concurrent
    requests share forwards. Tokenizing a long input is moved off the event loop."""

    INLINE_CHARS = 16_384  # below this, prepare (tokenize) inline: well under a millisecond

    def __init__(self, model: RuntimeModel, **batcher_options: Any) -> None:
        self.model = model
        self.batcher: MicroBatcher[str, Any] = MicroBatcher(model.forward, **batcher_options)

    @property
    def card(self) -> Any:
        return self.model.card

    async def _prepare(self, call: Callable[[], Prepared], size: int) -> Prepared:
        return call() if size <= self.INLINE_CHARS else await asyncio.to_thread(call)

    async def classify(self, inputs: Any, options: Any = None) -> ClassifyResult:
        prepared = await self._prepare(lambda: self.model.prepare(inputs, options, "classify"), _size(inputs))
        return cast(ClassifyResult, await self._run(prepared))

    async def embed(
        self, inputs: Any, options: Any = None, dimensions: int | None = None, layer: int | None = None
    ) -> EmbeddingsResult:
        checker = getattr(self.model, "check_embedding_shape", None)
        if checker is not None:
            checker(dimensions, layer)
        prepared = await self._prepare(
            lambda: self.model.prepare(inputs, options, "embeddings"), _size(inputs)
        )
        return cast(EmbeddingsResult, await self._run(prepared))

    async def _run(self, prepared: Prepared) -> ClassifyResult | EmbeddingsResult:
        stats = BatchStats()
        outputs = await self.batcher.submit_many(prepared.segment_texts, prepared.segment_tokens, stats)
        return self.model.finish(prepared, outputs, stats.forward_ms, stats.queue_ms)

    async def aclose(self) -> None:
        await self.batcher.aclose()


def _size(inputs: Any) -> int:
    if isinstance(inputs, str):
        return len(inputs)
    if isinstance(inputs, list | tuple):
        return sum(len(x) if isinstance(x, str) else 0 for x in inputs)
    return 0
