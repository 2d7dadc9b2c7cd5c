"""A project-written messages-style upstream (`POST /v1/messages`) for tests: a real HTTP server.

    with FakeMessagesUpstream(name="claude") as up:
        up.base_url            # http://127.0.0.1:<free port>/v1  (posts go to {base_url}/messages)
        ...                    # point the code under test at it
        up.requests[-1].body   # what it received

It checks requests as strictly as the real API does, answering 400 with a messages
error body (`{"type": "error", "error": {"type": "invalid_request_error", ...}}`) for
a chat-shaped body (system/tool roles, `tool_calls`, `max_completion_tokens`,
`stream_options`, OpenAI-style tools), a missing max_tokens, turns that do not
alternate, a tool_result that answers no tool_use of the previous turn, or a
tool_use left without its result.

Answers: with tools and a last user turn mentioning "weather", a `tool_use` of the
weather tool (or the first tool) with {"location": <"in City"> or "Paris"};
after tool results, a text quoting them; otherwise an echo of the last user text.
stop_sequences and max_tokens (counted in words) cut the reply as the real API
does. Streams follow the real event sequence (message_start, content_block_start,
ping, content_block_delta..., content_block_stop, message_delta with usage,
message_stop), written in pieces that split frames at odd places.

Behaviour knobs (constructor keywords or `configure()`): fail_status/fail_times
(e.g. 500, 529 overloaded, 429 with retry_after), api_key (require x-api-key and
anthropic-version), reply, cache_read_tokens, stream_error_after_events (send an
`event: error` after N events), end_after_events (end the body cleanly after N
events, without message_stop), answer_body (a non-stream answer sent as written, with
status 200 and answer_content_type) and stream_body (an event stream sent as written,
in pieces): answers no translator can make sense of.

Standalone: python -m tests.fakes.messages_upstream --port 18095 --name claude
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.fakes.served import ServedApp
from tests.fakes.upstream import RecordedRequest, text_pieces

REQUEST_KEYS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
    }
)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
SPLIT_SIZES = (17, 5, 31, 11, 3)  # stream write sizes: frames end up split at odd places
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_CITY = re.compile(r"\bin ([A-Z][A-Za-z]+(?: [A-Z][A-Za-z]+)*)")


@dataclass
class MessagesBehavior:
    fail_status: int | None = None
    fail_times: int | None = None  # None: every request fails while fail_status is set
    retry_after: str | None = None
    api_key: str | None = None
    reply: str | None = None
    cache_read_tokens: int = 0
    stream_error_after_events: int | None = None
    end_after_events: int | None = None
    answer_body: str | None = None
    answer_content_type: str = "application/json"
    stream_body: str | None = None
    chunk_chars: int | None = None  # stream text in pieces of this many characters (default: words)


class InvalidRequest(Exception):
    pass


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


# -- strict request checks --------------------------------------------------------------
def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidRequest(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_request(body: Any) -> None:
    """Raises InvalidRequest with the real API's kind of message."""
    _require(isinstance(body, dict), "body must be a JSON object")
    extra = sorted(set(body) - REQUEST_KEYS)
    _require(not extra, f"{extra[0] if extra else ''}: Extra inputs are not permitted")
    _require(isinstance(body.get("model"), str) and body["model"], "model: Field required")
    _require(_is_int(body.get("max_tokens")) and body["max_tokens"] >= 1, "max_tokens: Field required")
    system = body.get("system")
    if system is not None:
        _require(
            isinstance(system, str) or (isinstance(system, list) and all(_is_text_block(b) for b in system)),
            "system: must be a string or a list of text blocks",
        )
    stops = body.get("stop_sequences")
    if stops is not None:
        _require(
            isinstance(stops, list) and all(isinstance(s, str) for s in stops), "stop_sequences: list[str]"
        )
    if body.get("temperature") is not None:
        _require(_is_number(body["temperature"]) and 0 <= body["temperature"] <= 1, "temperature: 0..1")
    if body.get("top_p") is not None:
        _require(_is_number(body["top_p"]) and 0 <= body["top_p"] <= 1, "top_p: 0..1")
    if body.get("top_k") is not None:
        _require(_is_int(body["top_k"]), "top_k: integer")
    if body.get("stream") is not None:
        _require(isinstance(body["stream"], bool), "stream: boolean")
    metadata = body.get("metadata")
    if metadata is not None:
        _require(isinstance(metadata, dict) and set(metadata) <= {"user_id"}, "metadata: only user_id")
    tool_names = _validate_tools(body.get("tools"), body.get("tool_choice"))
    _validate_messages(body.get("messages"), tool_names)


def _is_text_block(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and bool(block["text"])
        and set(block) <= {"type", "text", "cache_control", "citations"}
    )


def _validate_tools(tools: Any, choice: Any) -> set[str]:
    names: set[str] = set()
    if tools is not None:
        _require(isinstance(tools, list), "tools: must be a list")
        for i, tool in enumerate(tools):
            _require(isinstance(tool, dict), f"tools.{i}: must be an object")
            extra = set(tool) - {"name", "description", "input_schema", "cache_control", "type"}
            _require(not extra, f"tools.{i}: Extra inputs are not permitted ({sorted(extra)})")
            _require(tool.get("type", "custom") == "custom", f"tools.{i}.type: unknown tool type")
            _require(
                isinstance(tool.get("name"), str) and bool(_TOOL_NAME.match(tool["name"])), f"tools.{i}.name"
            )
            schema = tool.get("input_schema")
            _require(
                isinstance(schema, dict) and schema.get("type") == "object", f"tools.{i}.input_schema.type"
            )
            names.add(tool["name"])
    if choice is not None:
        _require(isinstance(choice, dict), "tool_choice: must be an object")
        _require(tools is not None, "tool_choice may only be specified while providing tools")
        _require(set(choice) <= {"type", "name", "disable_parallel_tool_use"}, "tool_choice: extra inputs")
        _require(choice.get("type") in ("auto", "any", "tool", "none"), "tool_choice.type")
        if choice["type"] == "tool":
            _require(choice.get("name") in names, "tool_choice.name: no such tool")
    return names


def _validate_messages(messages: Any, tool_names: set[str]) -> None:
    _require(isinstance(messages, list) and messages, "messages: at least one message is required")
    pending: set[str] = set()  # tool_use ids of the previous assistant turn
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        _require(
            isinstance(message, dict) and set(message) == {"role", "content"},
            f"{where}: role and content only",
        )
        role = message["role"]
        _require(role in ("user", "assistant"), f"{where}.role: Input should be 'user' or 'assistant'")
        _require(
            role == ("user" if i % 2 == 0 else "assistant"), f"{where}: roles must alternate, user first"
        )
        blocks = _blocks(message["content"], where)
        if role == "user":
            results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            _require(
                set(results) == pending, f"{where}: each tool_use needs exactly one tool_result next turn"
            )
            kinds = [b["type"] for b in blocks]
            _require(kinds[: len(results)] == ["tool_result"] * len(results), f"{where}: tool_result first")
            pending = set()
        else:
            _require(not pending, f"{where}: tool_use ids {sorted(pending)} were never answered")
            for block in blocks:
                _require(
                    block["type"] in ("text", "tool_use", "thinking"),
                    f"{where}: {block['type']} in assistant",
                )
            pending = {b["id"] for b in blocks if b["type"] == "tool_use"}
            for block in blocks:
                if block["type"] == "tool_use":
                    _require(block["name"] in tool_names, f"{where}: tool {block['name']!r} is not defined")
    _require(not pending, "the last assistant turn's tool_use blocks have no tool_result")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        _require(bool(content), f"{where}.content: must not be empty")
        return [{"type": "text", "text": content}]
    _require(isinstance(content, list) and content, f"{where}.content: a non-empty string or list of blocks")
    for j, block in enumerate(content):
        _check_block(block, f"{where}.content.{j}")
    return content


def _check_block(block: Any, where: str) -> None:
    _require(isinstance(block, dict), f"{where}: must be an object")
    kind = block.get("type")
    if kind == "text":
        _require(_is_text_block(block), f"{where}: text blocks must be non-empty")
    elif kind == "image":
        source = block.get("source") or {}
        if source.get("type") == "base64":
            _require(source.get("media_type") in IMAGE_TYPES and isinstance(source.get("data"), str), where)
        else:
            _require(source.get("type") == "url" and isinstance(source.get("url"), str), f"{where}.source")
    elif kind == "document":
        source = block.get("source") or {}
        _require(source.get("type") in ("base64", "url", "text"), f"{where}.source")
    elif kind == "tool_use":
        _require(set(block) <= {"type", "id", "name", "input", "cache_control"}, f"{where}: extra inputs")
        _require(
            isinstance(block.get("id"), str) and isinstance(block.get("name"), str), f"{where}: id, name"
        )
        _require(isinstance(block.get("input"), dict), f"{where}.input: must be an object")
    elif kind == "tool_result":
        _require(
            set(block) <= {"type", "tool_use_id", "content", "is_error", "cache_control"}, f"{where}: extra"
        )
        _require(isinstance(block.get("tool_use_id"), str), f"{where}.tool_use_id")
        content = block.get("content")
        if isinstance(content, list):
            for k, part in enumerate(content):
                _require(
                    isinstance(part, dict) and part.get("type") in ("text", "image"), f"{where}.content.{k}"
                )
                _check_block(part, f"{where}.content.{k}")
        else:
            _require(content is None or isinstance(content, str), f"{where}.content")
    elif kind == "thinking":
        _require(isinstance(block.get("thinking"), str), f"{where}.thinking")
    else:
        raise InvalidRequest(f"{where}.type: unknown content block type {kind!r}")


# -- answers --------------------------------------------------------------------------------
def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            _text_of(b.get("content")) if b.get("type") == "tool_result" else b.get("text", "")
            for b in content
            if isinstance(b, dict)
        )
    return ""


def _words(text: str) -> int:
    return len(text.split())


class FakeMessagesUpstream(ServedApp):
    def __init__(self, name: str = "claude", prefix: str = "/v1", port: int = 0, **behavior: Any) -> None:
        super().__init__(name, prefix, port, MessagesBehavior())
        self.configure(**behavior)
        self.failures_sent = 0
        self.rejected = 0  # requests answered 400 by validation
        self.app = self._build_app()

    # -- control -------------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.failures_sent = 0
            self.rejected = 0
        self.behavior = MessagesBehavior()

    # -- the app -------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.post(f"{self.prefix}/messages")
        async def messages(request: Request) -> Response:
            raw = await request.body()
            headers = {k.lower(): v for k, v in request.headers.items()}
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            with self._lock:
                self.requests.append(RecordedRequest(request.url.path, headers, body))
            behavior = self.behavior
            if behavior.api_key is not None:
                if headers.get("x-api-key") != behavior.api_key:
                    return JSONResponse(
                        error_body("authentication_error", "invalid x-api-key"), status_code=401
                    )
                if not headers.get("anthropic-version"):
                    return JSONResponse(
                        error_body("invalid_request_error", "anthropic-version: header is required"),
                        status_code=400,
                    )
            try:
                validate_request(body)
            except InvalidRequest as exc:
                with self._lock:
                    self.rejected += 1
                return JSONResponse(error_body("invalid_request_error", str(exc)), status_code=400)
            if behavior.fail_status is not None and (
                behavior.fail_times is None or self.failures_sent < behavior.fail_times
            ):
                with self._lock:
                    self.failures_sent += 1
                status = behavior.fail_status
                extra = {"retry-after": behavior.retry_after} if behavior.retry_after else None
                kind = ERROR_TYPES.get(status, "api_error")
                return JSONResponse(
                    error_body(kind, f"{self.name} failing with {status}"), status, headers=extra
                )
            if body.get("stream") and behavior.stream_body is not None:
                return StreamingResponse(
                    _pieces(behavior.stream_body.encode()), media_type="text/event-stream"
                )
            if not body.get("stream") and behavior.answer_body is not None:
                return Response(behavior.answer_body, media_type=behavior.answer_content_type)
            message = self._message(body)
            if body.get("stream"):
                return StreamingResponse(self._stream(message), media_type="text/event-stream")
            return JSONResponse(message)

        return app

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        blocks, stop_reason, stop_sequence = self._answer(body)
        prompt = _words(_text_of(body.get("system"))) + sum(
            _words(_text_of(m["content"])) for m in body["messages"]
        )
        output = sum(_words(b.get("text", "")) + len(b.get("input", {})) for b in blocks)
        usage: dict[str, Any] = {"input_tokens": prompt, "output_tokens": output}
        if self.behavior.cache_read_tokens:
            usage |= {
                "cache_read_input_tokens": self.behavior.cache_read_tokens,
                "cache_creation_input_tokens": 0,
            }
        return {
            "id": f"msg_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": blocks,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": usage,
        }

    def _answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str | None]:
        last = body["messages"][-1]
        content = (
            last["content"]
            if isinstance(last["content"], list)
            else [{"type": "text", "text": last["content"]}]
        )
        results = [b for b in content if b.get("type") == "tool_result"]
        tools = body.get("tools") or []
        choice = (body.get("tool_choice") or {}).get("type", "auto")
        text = _text_of(last["content"])
        if results:
            reply = f"[{self.name}] tool result: " + "; ".join(_text_of(b.get("content")) for b in results)
        elif tools and choice != "none" and ("weather" in text.lower() or choice in ("any", "tool")):
            return self._tool_use(body, tools, text, choice), "tool_use", None
        else:
            reply = self.behavior.reply or f"[{self.name}] model={body['model']} echo: {text}"
        stop_reason, stop_sequence = "end_turn", None
        hits = [(reply.find(s), s) for s in body.get("stop_sequences") or [] if s and s in reply]
        if hits:
            cut, stop_sequence = min(hits)
            reply, stop_reason = reply[:cut], "stop_sequence"
        words = reply.split(" ")
        if len(words) > body["max_tokens"]:
            reply, stop_reason, stop_sequence = " ".join(words[: body["max_tokens"]]), "max_tokens", None
        return ([{"type": "text", "text": reply}] if reply else []), stop_reason, stop_sequence

    @staticmethod
    def _tool_use(
        body: dict[str, Any], tools: list[dict[str, Any]], text: str, choice: str
    ) -> list[dict[str, Any]]:
        forced = (body.get("tool_choice") or {}).get("name")
        tool = next((t for t in tools if t["name"] == forced), None) or next(
            (t for t in tools if "weather" in t["name"].lower()), tools[0]
        )
        city = _CITY.search(text)
        blocks: list[dict[str, Any]] = []
        if choice == "auto":  # forced tool use comes without a preamble, as upstream
            blocks.append({"type": "text", "text": "Let me check the weather."})
        blocks.append(
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:20]}",
                "name": tool["name"],
                "input": {"location": city.group(1) if city else "Paris", "unit": "celsius"},
            }
        )
        return blocks

    # -- streaming -------------------------------------------------------------------
    def events(self, message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The real event sequence for a complete message."""
        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
        start["usage"] = {**message["usage"], "output_tokens": 1}
        out: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        for index, block in enumerate(message["content"]):
            opening = {"type": "text", "text": ""} if block["type"] == "text" else {**block, "input": {}}
            out.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": opening},
                )
            )
            if index == 0:
                out.append(("ping", {"type": "ping"}))
            if block["type"] == "text":
                pieces = text_pieces(block["text"], self.behavior.chunk_chars)
                deltas = [{"type": "text_delta", "text": p} for p in pieces if p]
            else:
                raw = json.dumps(block["input"])
                step = max(1, len(raw) // 3)
                deltas = [
                    {"type": "input_json_delta", "partial_json": ""}
                ]  # the real API opens with an empty one
                deltas += [
                    {"type": "input_json_delta", "partial_json": raw[i : i + step]}
                    for i in range(0, len(raw), step)
                ]
            out += [
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                for d in deltas
            ]
            out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
        usage = {"output_tokens": message["usage"]["output_tokens"]}
        out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    async def _stream(self, message: dict[str, Any]) -> AsyncIterator[bytes]:
        behavior = self.behavior
        events = self.events(message)
        if behavior.stream_error_after_events is not None:
            events = events[: behavior.stream_error_after_events]
            events.append(("error", error_body("overloaded_error", "Overloaded")))
        elif behavior.end_after_events is not None:
            events = events[: behavior.end_after_events]
        raw = b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)
        async for piece in _pieces(raw):
            yield piece


async def _pieces(raw: bytes) -> AsyncIterator[bytes]:
    """`raw` in writes of SPLIT_SIZES bytes: frames end up split at odd places."""
    pos = n = 0
    while pos < len(raw):
        size = SPLIT_SIZES[n % len(SPLIT_SIZES)]
        yield raw[pos : pos + size]
        pos, n = pos + size, n + 1
        await asyncio.sleep(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="messages-style (POST /v1/messages) fake upstream for tests")
    parser.add_argument("--port", type=int, default=18095)
    parser.add_argument("--name", default="claude")
    parser.add_argument("--api-key", help="require this x-api-key (and an anthropic-version header)")
    parser.add_argument("--fail-status", type=int)
    args = parser.parse_args(argv)
    fake = FakeMessagesUpstream(name=args.name, api_key=args.api_key, fail_status=args.fail_status)
    print(f"fake messages upstream {args.name!r} on http://127.0.0.1:{args.port}/v1/messages", flush=True)
    uvicorn.run(fake.app, host="127.0.0.1", port=args.port, log_level="info")


if __name__ == "__main__":
    main()
