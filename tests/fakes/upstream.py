"""A project-written OpenAI-compatible upstream LLM for tests: a real HTTP server.

    with FakeUpstream(name="a") as up:
        up.base_url            # http://127.0.0.1:<free port>/v1
        ...                    # point the code under test at it
        up.requests[-1].body   # what it received

Endpoints: POST {prefix}/chat/completions (JSON or SSE, echoing the model it saw and
the last user message, with usage), GET {prefix}/models (and /v1/models), and admin
routes for standalone use: POST /_admin/configure (behaviour fields as JSON),
POST /_admin/reset, POST /_admin/release, GET /_admin/stats.

Behaviour knobs (constructor keywords or `configure()`): fail_status/fail_times
(answer that status N times, or always when fail_times is None), retry_after,
delay_s (before the response headers), first_byte_delay_s (stream: after headers),
chunk_delay_s, reply (fixed text), tool_call ({"name", "arguments"}),
hold_after_chunks (stream: pause after N chunks until `release()`), abort_after_chunks
(stream: drop the connection after N chunks), finish_reason, chunk_chars (stream the reply
in pieces of that many characters).

Standalone: python -m tests.fakes.upstream --port 18090 --name a
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.fakes.served import ServedApp

HOLD_LIMIT_S = 30.0  # a held stream never waits longer than this, so a test cannot hang


@dataclass
class Behavior:
    fail_status: int | None = None
    fail_times: int | None = None  # None: every request fails while fail_status is set
    fail_body: dict[str, Any] | None = None
    retry_after: str | None = None
    delay_s: float = 0.0
    first_byte_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    reply: str | None = None
    tool_call: dict[str, Any] | None = None
    hold_after_chunks: int | None = None
    abort_after_chunks: int | None = None
    finish_reason: str = "stop"
    chunk_chars: int | None = None  # stream the reply in pieces of this many characters (default: words)


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float = field(default_factory=time.monotonic)


def text_pieces(text: str, chunk_chars: int | None) -> list[str]:
    """A streamed reply's pieces: word by word, or `chunk_chars` characters at a time (which
    cuts words, and whatever else the text holds, anywhere)."""
    if chunk_chars:
        return [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)]
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


class _Abort(Exception):
    """Raised inside a stream to drop the connection mid-body."""


class _SwallowAbort:
    """Ends the response without completing it (the client sees a broken body), quietly."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        with contextlib.suppress(_Abort):
            await self.app(scope, receive, send)


class FakeUpstream(ServedApp):
    backlog = 2048

    def __init__(self, name: str = "fake", prefix: str = "/v1", port: int = 0, **behavior: Any) -> None:
        super().__init__(name, prefix, port, Behavior())
        self.configure(**behavior)
        self._release = threading.Event()
        self.failures_sent = 0
        self.chunks_sent = 0
        self.streams_completed = 0
        self.app = _SwallowAbort(self._build_app())

    # -- control -------------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.failures_sent = 0
            self.chunks_sent = 0
            self.streams_completed = 0
        self.behavior = Behavior()
        self._release.clear()

    def release(self) -> None:
        """Let a stream held by hold_after_chunks continue."""
        self._release.set()

    def _before_stop(self) -> None:
        self._release.set()

    # -- the app -------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        app = FastAPI()
        models_paths = {f"{self.prefix}/models", "/v1/models"}

        async def models() -> dict[str, Any]:
            return {
                "object": "list",
                "data": [{"id": f"{self.name}-model", "object": "model", "created": 0, "owned_by": "fake"}],
            }

        for path in models_paths:
            app.add_api_route(path, models, methods=["GET"])

        app.add_api_route(f"{self.prefix}/chat/completions", self._chat, methods=["POST"], name="chat")

        @app.post("/_admin/configure")
        async def admin_configure(request: Request) -> dict[str, Any]:
            self.configure(**(await request.json()))
            return asdict(self.behavior)

        @app.post("/_admin/reset")
        async def admin_reset() -> dict[str, str]:
            self.reset()
            return {"status": "ok"}

        @app.post("/_admin/release")
        async def admin_release() -> dict[str, str]:
            self.release()
            return {"status": "ok"}

        @app.get("/_admin/stats")
        async def admin_stats() -> dict[str, Any]:
            last = self.last_request
            return {
                "name": self.name,
                "request_count": self.request_count,
                "chunks_sent": self.chunks_sent,
                "failures_sent": self.failures_sent,
                "last_request": None if last is None else {"path": last.path, "body": last.body},
            }

        return app

    async def _chat(self, request: Request) -> Response:
        raw = await request.body()
        body = self._record(request.url.path, request.headers.items(), raw)
        behavior = self.behavior
        if behavior.delay_s:
            await asyncio.sleep(behavior.delay_s)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return JSONResponse(
                {"error": {"message": "messages is required", "type": "invalid_request_error"}},
                status_code=400,
            )
        if behavior.fail_status is not None and (
            behavior.fail_times is None or self.failures_sent < behavior.fail_times
        ):
            return self._failure(behavior, behavior.fail_status)
        if body.get("stream"):
            return StreamingResponse(self._stream(body, behavior), media_type="text/event-stream")
        return JSONResponse(self._completion(body, behavior))

    def _record(self, path: str, headers: Iterable[tuple[str, str]], raw: bytes) -> Any:
        """Remember the request; returns its body, parsed as JSON when it is JSON."""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        with self._lock:
            self.requests.append(RecordedRequest(path, {k.lower(): v for k, v in headers}, body))
        return body

    def _failure(self, behavior: Behavior, status: int) -> JSONResponse:
        with self._lock:
            self.failures_sent += 1
        headers = {"retry-after": behavior.retry_after} if behavior.retry_after else None
        error = behavior.fail_body or {
            "error": {
                "message": f"{self.name} failing with {status}",
                "type": "fake_error",
            }
        }
        return JSONResponse(error, status_code=status, headers=headers)

    # -- answers -------------------------------------------------------------------
    def _reply_text(self, body: dict[str, Any], behavior: Behavior) -> str:
        if behavior.reply is not None:
            return behavior.reply
        last_user = next(
            (
                _text(m.get("content"))
                for m in reversed(body["messages"])
                if isinstance(m, dict) and m.get("role") == "user"
            ),
            "",
        )
        return f"[{self.name}] model={body.get('model')} echo: {last_user}"

    @staticmethod
    def _usage(body: dict[str, Any], reply: str) -> dict[str, int]:
        prompt = sum(len(_text(m.get("content")).split()) for m in body["messages"] if isinstance(m, dict))
        completion = len(reply.split())
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _completion(self, body: dict[str, Any], behavior: Behavior) -> dict[str, Any]:
        reply = self._reply_text(body, behavior)
        message: dict[str, Any] = {"role": "assistant", "content": reply}
        finish = behavior.finish_reason
        if behavior.tool_call:
            message = {"role": "assistant", "content": None, "tool_calls": [self._tool_call()]}
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": self._usage(body, reply),
            "upstream": self.name,
        }

    def _tool_call(self) -> dict[str, Any]:
        call = self.behavior.tool_call or {}
        return {
            "id": call.get("id", "call_fake1"),
            "type": "function",
            "function": {"name": call.get("name", "fn"), "arguments": call.get("arguments", "{}")},
        }

    def _chunks(self, body: dict[str, Any], behavior: Behavior) -> list[str]:
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model"),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return json.dumps({**base, "choices": [choice]})

        reply = self._reply_text(body, behavior)
        out = [chunk({"role": "assistant", "content": ""})]
        if behavior.tool_call:
            call = self._tool_call()
            args = call["function"]["arguments"]
            half = len(args) // 2
            first = {
                "index": 0,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": args[:half]},
            }
            out += [
                chunk({"tool_calls": [first]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}),
                chunk({}, "tool_calls"),
            ]
        else:
            out += [chunk({"content": p}) for p in text_pieces(reply, behavior.chunk_chars) if p]
            out.append(chunk({}, behavior.finish_reason))
        if (body.get("stream_options") or {}).get("include_usage"):
            out.append(json.dumps({**base, "choices": [], "usage": self._usage(body, reply)}))
        out.append("[DONE]")
        return out

    async def _stream(self, body: dict[str, Any], behavior: Behavior) -> AsyncIterator[bytes]:
        if behavior.first_byte_delay_s:
            await asyncio.sleep(behavior.first_byte_delay_s)
        for n, data in enumerate(self._chunks(body, behavior)):
            if n and behavior.chunk_delay_s:
                await asyncio.sleep(behavior.chunk_delay_s)
            if behavior.abort_after_chunks is not None and n >= behavior.abort_after_chunks:
                raise _Abort(f"{self.name}: aborting the stream after {n} chunks")
            if behavior.hold_after_chunks is not None and n == behavior.hold_after_chunks:
                waited = 0.0
                while not self._release.is_set() and waited < HOLD_LIMIT_S:
                    await asyncio.sleep(0.01)
                    waited += 0.01
            with self._lock:
                self.chunks_sent += 1
            yield f"data: {data}\n\n".encode()
        with self._lock:
            self.streams_completed += 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake upstream LLM for tests")
    parser.add_argument("--port", type=int, default=18090)
    parser.add_argument("--name", default="fake")
    parser.add_argument("--prefix", default="/v1")
    parser.add_argument("--fail-status", type=int)
    parser.add_argument("--fail-times", type=int)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before the response headers")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between stream chunks")
    parser.add_argument("--reply", help="fixed reply text (default: echo)")
    args = parser.parse_args(argv)
    fake = FakeUpstream(
        name=args.name,
        prefix=args.prefix,
        fail_status=args.fail_status,
        fail_times=args.fail_times,
        delay_s=args.delay,
        chunk_delay_s=args.chunk_delay,
        reply=args.reply,
    )
    print(f"fake upstream {args.name!r} on http://127.0.0.1:{args.port}{fake.prefix}", flush=True)
    uvicorn.run(fake.app, host="127.0.0.1", port=args.port, log_level="info")


if __name__ == "__main__":
    main()
