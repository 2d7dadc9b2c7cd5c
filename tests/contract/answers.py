"""What a client sees of one answer, normalized so two front doors' answers compare equal
when they say the same thing: status, the client-visible headers (no transport headers,
ids or timings), the body without ids, creation times and timing fields."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

from app.upstream.sse import SSEParser

# Transport headers, ids and timing values: they may differ between two correct answers.
UNCOMPARED_HEADERS = frozenset(
    {
        "date",
        "server",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "x-envoy-upstream-service-time",
        "x-request-id",
        "x-processing-time",
        "x-classification-time",
        "x-vsr-replay-id",
    }
)
# Ids, creation times and timings inside bodies (at any depth), and one door-specific field.
VOLATILE_FIELDS = frozenset(
    {
        "id",
        "item_id",
        "response_id",
        "created",
        "created_at",
        "completed_at",
        "system_fingerprint",
        "processing_time_ms",
        # A Responses object's `store`: the Ingress keeps responses (GET /v1/responses/{id},
        # previous_response_id: tests/unit/exchange/test_responses_store.py); the ext_proc bridge has no
        # Responses store and says so (false). Everything else of the answer is the same.
        "store",
    }
)
EVENT_STREAM = "text/event-stream"


class HttpResponse(Protocol):
    """An httpx response, or the OpenAI SDK's own (its vendored httpx)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content(self) -> bytes: ...


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: Any  # a JSON document, a list of SSE events (JSON or "[DONE]"), or text

    @classmethod
    def of(cls, response: HttpResponse, body: bytes | None = None) -> Answer:
        """`body`: what the client read (default: the whole body)."""
        raw = response.content if body is None else body
        return cls(response.status_code, client_headers(response.headers), normalized_body(response, raw))

    @property
    def text(self) -> str:
        """The answer's text: a chat completion's or Responses object's, or its stream's deltas."""
        return answer_text(self.body)


def client_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Lower-cased, uncompared ones dropped; content-type by media type only (a charset
    parameter is the server library's, not the router's)."""
    out = {name.lower(): value for name, value in headers.items() if name.lower() not in UNCOMPARED_HEADERS}
    if "content-type" in out:
        out["content-type"] = out["content-type"].split(";", 1)[0].strip()
    return out


def normalized_body(response: HttpResponse, raw: bytes) -> Any:
    if EVENT_STREAM in response.headers.get("content-type", ""):
        return [
            event.data if event.is_done else without_volatile(event.json()) for event in SSEParser().feed(raw)
        ]
    try:
        return without_volatile(json.loads(raw))
    except ValueError:
        return raw.decode("utf-8", "replace")


def without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if k not in VOLATILE_FIELDS}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def answer_text(body: Any) -> str:
    if isinstance(body, list):  # a stream: chat chunks or Responses events
        parts = []
        for event in body:
            if not isinstance(event, dict):
                continue
            if event.get("type") == "response.output_text.delta":
                parts.append(event.get("delta") or "")
            for choice in event.get("choices") or []:
                parts.append((choice.get("delta") or {}).get("content") or "")
        return "".join(parts)
    if isinstance(body, dict) and body.get("object") == "response":
        return "".join(
            part.get("text", "")
            for item in body.get("output") or []
            if item.get("type") == "message"
            for part in item.get("content") or []
        )
    if isinstance(body, dict) and body.get("choices"):
        return body["choices"][0]["message"].get("content") or ""
    return ""


# -- clients ---------------------------------------------------------------------------------------
Call = Callable[[str], Answer]  # the door's base URL -> the answer its client saw


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0, timeout=60)


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


def sdk_chat(url: str, messages: Sequence[Mapping[str, Any]], model: str = "MoM", **params: Any) -> Answer:
    """A chat completion with the OpenAI SDK, read by the SDK (an error status raises
    openai.APIStatusError); `params`: the SDK's other create() arguments."""
    raw = sdk(url).chat.completions.with_raw_response.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]  # plain dicts are the SDK's message shapes
        **params,
    )
    raw.parse()
    return Answer.of(raw.http_response)


def chat(text: str, model: str = "MoM") -> Call:
    """A chat completion with the OpenAI SDK (an error status is the same answer, raised)."""

    def call(url: str) -> Answer:
        try:
            return sdk_chat(url, user(text), model)
        except openai.APIStatusError as exc:
            return Answer.of(exc.response)

    return call


def sdk_chat_stream(url: str, messages: Sequence[Mapping[str, Any]], model: str = "MoM") -> Answer:
    """A streamed chat completion with the OpenAI SDK, read whole (an error status raises)."""
    with sdk(url).chat.completions.with_streaming_response.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]  # plain dicts are the SDK's message shapes
        stream=True,
    ) as response:
        return Answer.of(response.http_response, response.read())


def chat_stream(text: str, model: str = "MoM") -> Call:
    def call(url: str) -> Answer:
        try:
            return sdk_chat_stream(url, user(text), model)
        except openai.APIStatusError as exc:
            return Answer.of(exc.response)

    return call


def responses(text: str, model: str = "MoM") -> Call:
    def call(url: str) -> Answer:
        try:
            raw = sdk(url).responses.with_raw_response.create(model=model, input=text)
        except openai.APIStatusError as exc:
            return Answer.of(exc.response)
        raw.parse()
        return Answer.of(raw.http_response)

    return call


def responses_stream(text: str, model: str = "MoM") -> Call:
    def call(url: str) -> Answer:
        try:
            with sdk(url).responses.with_streaming_response.create(
                model=model, input=text, stream=True
            ) as response:
                return Answer.of(response.http_response, response.read())
        except openai.APIStatusError as exc:
            return Answer.of(exc.response)

    return call


def leave_mid_stream(text: str, model: str = "MoM") -> Call:
    """Raw httpx: read the stream's first event, then close the connection. The answer's
    body is that first event."""

    def call(url: str) -> Answer:
        body = {"model": model, "stream": True, "messages": user(text)}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
            read = b""
            for chunk in response.iter_raw():
                read += chunk
                if b"\n\n" in read:
                    break
        first = read.split(b"\n\n", 1)[0] + b"\n\n"
        return Answer.of(response, first)

    return call
