"""Steady client load for the fault tests and the soak (bench/soak.py): worker threads, each
sending chat requests back to back over its own keep-alive connection (or a new connection
per request: `keep_alive=False`), recording every outcome
(when it was sent and answered, the status, the body, a transport error, whether a stream
ended with [DONE] and no error event). No retries: a failure is counted as the client saw it.

    load = ChatLoad("http://127.0.0.1:8080/v1/chat/completions", workers=4, stream_workers=1)
    load.start()
    load.wait_for(20)          # 20 answered requests
    ...                        # the fault
    load.stop()
    load.failures()            # every outcome that was not a whole answer
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Outcome:
    sent_at: float  # time.monotonic()
    done_at: float
    stream: bool
    status: int | None = None  # None: no HTTP answer at all
    content_type: str = ""
    body: bytes = b""
    error: str | None = None  # a transport error (connection refused, reset, body cut short)
    stream_done: bool = False  # the stream's [DONE] arrived
    stream_error: dict[str, Any] | None = None  # an error event in the stream

    @property
    def ok(self) -> bool:
        """A whole answer: a 200 body, or a stream that reached [DONE] with no error event (the
        OpenAI SDK stops reading there, so a connection lost after it loses the client nothing)."""
        if self.status != 200:
            return False
        if self.stream:
            return self.stream_done and self.stream_error is None
        return self.error is None

    def error_body(self) -> dict[str, Any] | None:
        """The spec's data-plane error body (error{message, type, ...}) when the answer is one."""
        if "application/json" not in self.content_type:
            return None
        try:
            parsed = json.loads(self.body)
        except ValueError:
            return None
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if (
            isinstance(error, dict)
            and isinstance(error.get("message"), str)
            and isinstance(error.get("type"), str)
        ):
            return error
        return None

    def describe(self) -> str:
        return (
            f"stream={self.stream} status={self.status} type={self.content_type!r} error={self.error!r} "
            f"done={self.stream_done} stream_error={self.stream_error} body={self.body[:200]!r}"
        )


def default_prompt(i: int) -> str:
    return f"Request {i}: say something about topic {i % 17}"


@dataclass
class ChatLoad:
    url: str  # .../v1/chat/completions
    workers: int = 4
    stream_workers: int = 0
    prompt: Callable[[int], str] = default_prompt
    model: str = "MoM"
    timeout_s: float = 120.0
    max_requests: int | None = None  # the load stops by itself after this many (None: at stop())
    keep_alive: bool = True
    outcomes: list[Outcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self._threads = [
            threading.Thread(target=self._work, args=(n >= self.workers,), daemon=True, name=f"load-{n}")
            for n in range(self.workers + self.stream_workers)
        ]

    @property
    def concurrency(self) -> int:
        return self.workers + self.stream_workers

    def start(self) -> ChatLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Let the requests in flight finish, then stop the workers."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=timeout_s if timeout_s is not None else self.timeout_s + 10)

    def done(self) -> bool:
        return not any(t.is_alive() for t in self._threads)

    def answered(self) -> int:
        with self._lock:
            return len(self.outcomes)

    def succeeded(self) -> int:
        with self._lock:
            return sum(o.ok for o in self.outcomes)

    def wait_for(self, answered: int, timeout_s: float = 180.0) -> None:
        """Until `answered` requests have an outcome; AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.answered() < answered:
            if time.monotonic() > deadline or self.done():
                raise AssertionError(f"only {self.answered()} of {answered} requests answered")
            time.sleep(0.05)

    def failures(self) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if not o.ok]

    def _next(self) -> int | None:
        if self._stop.is_set():
            return None
        with self._lock:
            number = next(self._numbers)
        if self.max_requests is not None and number >= self.max_requests:
            return None
        return number

    def _work(self, stream: bool) -> None:
        limits = httpx.Limits(max_keepalive_connections=1 if self.keep_alive else 0)
        with httpx.Client(timeout=self.timeout_s, limits=limits) as client:
            while (number := self._next()) is not None:
                body = {"model": self.model, "messages": [{"role": "user", "content": self.prompt(number)}]}
                if stream:
                    body["stream"] = True
                outcome = Outcome(sent_at=time.monotonic(), done_at=0.0, stream=stream)
                try:
                    _send(client, self.url, body, outcome)
                except httpx.HTTPError as exc:
                    outcome.error = f"{type(exc).__name__}: {exc}"
                outcome.done_at = time.monotonic()
                with self._lock:
                    self.outcomes.append(outcome)


def _send(client: httpx.Client, url: str, body: dict[str, Any], outcome: Outcome) -> None:
    with client.stream("POST", url, json=body) as response:
        outcome.status = response.status_code
        outcome.content_type = response.headers.get("content-type", "")
        if not outcome.stream or "text/event-stream" not in outcome.content_type:
            outcome.body = response.read()
            return
        for line in response.iter_lines():
            data = line.removeprefix("data: ").strip() if line.startswith("data: ") else ""
            if data == "[DONE]":
                outcome.stream_done = True
            elif data:
                chunk = json.loads(data)
                if isinstance(chunk, dict) and chunk.get("error"):
                    outcome.stream_error = chunk["error"]
