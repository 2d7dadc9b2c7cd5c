"""The client-facing APIs a front door accepts, each translated to and from chat once.

The router routes chat completions. `ChatApi` passes the client's chat body and answers
through; `ResponsesApi` (POST /v1/responses) parses a Responses request into a chat body,
renders the chat answer as a Responses object and re-encodes the chat event stream as
Responses events. The exchange holds one `ClientApi` per request; both front doors pick it
by path, so the two cannot translate differently.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import ValidationError

from app.common.errors import bad_request, validation_message
from app.exchange.openai_models import parse_chat_request
from app.upstream.responses_api import ChatToResponsesStream, chat_to_response
from app.upstream.responses_request import ResponsesRequest, responses_to_chat
from app.upstream.sse import SSEParser

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"


class ClientStream(Protocol):
    """Chat SSE bytes in, the client's SSE bytes out."""

    def feed(self, chat: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class ClientApi(Protocol):
    endpoint: str  # the metrics label

    def parse(self, raw: bytes) -> dict[str, Any]:
        """The chat body to route (raises SvcError 400 on bad input)."""
        ...

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        """A chat.completion (routing_metadata included) as the client's answer."""
        ...

    def stream(self) -> ClientStream: ...


class _Passthrough:
    def feed(self, chat: bytes) -> bytes:
        return chat

    def finish(self) -> bytes:
        return b""


def chat_body(raw: bytes) -> dict[str, Any]:
    """The client's own fields, passed through untouched, with the validated model name."""
    request = parse_chat_request(raw)
    body: dict[str, Any] = json.loads(raw)
    body["model"] = request.model
    return body


class ChatApi:
    endpoint = "chat_completions"

    def parse(self, raw: bytes) -> dict[str, Any]:
        return chat_body(raw)

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        return completion

    def stream(self) -> ClientStream:
        return _Passthrough()


class _ResponsesStream:
    def __init__(self, request: ResponsesRequest) -> None:
        self._translator = ChatToResponsesStream(request)
        self._parser = SSEParser()

    def feed(self, chat: bytes) -> bytes:
        return b"".join(out for event in self._parser.feed(chat) for out in self._translator.feed(event))

    def finish(self) -> bytes:
        return b"".join(self._translator.finish())


class ResponsesApi:
    endpoint = "responses"

    def __init__(self) -> None:
        self._request: ResponsesRequest | None = None

    def parse(self, raw: bytes) -> dict[str, Any]:
        try:
            self._request = ResponsesRequest.model_validate_json(raw)
            body = responses_to_chat(self._request)
        except ValueError as exc:  # a ValidationError, or ResponsesInputError for input chat cannot hold
            message = validation_message(exc.errors())[0] if isinstance(exc, ValidationError) else str(exc)
            raise bad_request(f"invalid Responses request: {message}") from exc
        return chat_body(json.dumps(body).encode())

    def render(self, completion: dict[str, Any]) -> dict[str, Any]:
        out = chat_to_response(completion, self._parsed())
        out["routing_metadata"] = completion.get("routing_metadata")
        return out

    def stream(self) -> ClientStream:
        return _ResponsesStream(self._parsed())

    def _parsed(self) -> ResponsesRequest:
        if self._request is None:
            raise RuntimeError("ResponsesApi used before parse()")
        return self._request


def client_api(path: str) -> ClientApi | None:
    """The API a request path asks for (query string ignored); None: not one the router handles."""
    path = path.split("?", 1)[0]
    if path == CHAT_PATH:
        return ChatApi()
    if path == RESPONSES_PATH:
        return ResponsesApi()
    return None
