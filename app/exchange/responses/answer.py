"""OpenAI Responses API answers from chat completions (the request side: `request`).

- `chat_to_response(chat_completion, req)`: a chat.completion -> a Responses object.
- `ChatToResponsesStream`: chat.completion.chunk events -> Responses SSE events
  (response.created, response.in_progress, response.output_item.added,
  response.content_part.added, response.output_text.delta/.done,
  response.function_call_arguments.delta/.done, response.output_item.done,
  response.completed | response.incomplete | response.failed), in the shapes the
  official OpenAI SDK parses (`client.responses.create(..., stream=True)` and
  `client.responses.stream(...)`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from app.common.chat_text import content_text
from app.exchange.responses.request import ResponsesRequest
from app.upstream.sse import SSEEvent, SSEParser, StreamAccumulator, encode_sse


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# -- response: chat -> Responses ---------------------------------------------------------
def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": int(prompt_details.get("cached_tokens") or 0),
            "cache_write_tokens": int(prompt_details.get("cache_write_tokens") or 0),
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": int(completion_details.get("reasoning_tokens") or 0)},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def _status(finish_reason: str | None) -> tuple[str, dict[str, Any] | None]:
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _response_shell(
    request: ResponsesRequest | None, response_id: str, created_at: int, model: str
) -> dict[str, Any]:
    req = request
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions if req else None,
        "max_output_tokens": req.max_output_tokens if req else None,
        "model": model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls
        if req and req.parallel_tool_calls is not None
        else True,
        "previous_response_id": req.previous_response_id if req else None,
        "reasoning": req.reasoning if req else None,
        "store": bool(req.store) if req and req.store is not None else False,
        "temperature": req.temperature if req else None,
        "text": (req.text if req and req.text else {"format": {"type": "text"}}),
        "tool_choice": (req.tool_choice if req and req.tool_choice is not None else "auto"),
        "tools": list(req.tools or []) if req else [],
        "top_p": req.top_p if req else None,
        "usage": None,
        "user": req.user if req else None,
        "metadata": dict(req.metadata or {}) if req else {},
    }


class _Ids:
    """Item ids shared by the streamed events and the final response object."""

    def __init__(self) -> None:
        self.message = _new_id("msg")
        self.reasoning = _new_id("rs")
        self.calls: dict[int, str] = {}

    def call(self, index: int) -> str:
        return self.calls.setdefault(index, _new_id("fc"))


def _output_items(message: dict[str, Any], status: str, ids: _Ids) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": ids.reasoning,
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning}],
                "status": "completed",
            }
        )
    text = content_text(message.get("content"))
    calls = message.get("tool_calls") or []
    refusal = message.get("refusal")
    if text or not calls or refusal:
        content: list[dict[str, Any]] = []
        if text or not refusal:
            content.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
        if refusal:
            content.append({"type": "refusal", "refusal": refusal})
        items.append(
            {"type": "message", "id": ids.message, "role": "assistant", "status": status, "content": content}
        )
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "id": ids.call(index),
                "call_id": call.get("id") or _new_id("call"),
                "name": function.get("name") or "",
                "arguments": function.get("arguments") or "",
                "status": "completed",
            }
        )
    return items


def _build_response(
    chat_completion: dict[str, Any],
    request: ResponsesRequest | None,
    response_id: str,
    created_at: int,
    ids: _Ids,
) -> dict[str, Any]:
    choices = chat_completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    status, incomplete = _status(choice.get("finish_reason"))
    model = chat_completion.get("model") or (request.model if request else "")
    response = _response_shell(request, response_id, created_at, model)
    output = _output_items(message, status, ids)
    response.update(
        status=status,
        incomplete_details=incomplete,
        output=output,
        output_text="".join(
            part["text"]
            for item in output
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        ),
        usage=_usage(chat_completion.get("usage")),
        completed_at=int(time.time()),
    )
    return response


def chat_to_response(
    chat_completion: dict[str, Any],
    request: ResponsesRequest | None = None,
    *,
    response_id: str | None = None,
    created_at: int | None = None,
) -> dict[str, Any]:
    """The Responses object (object "response") for a chat.completion."""
    return _build_response(
        chat_completion,
        request,
        response_id or _new_id("resp"),
        created_at if created_at is not None else int(chat_completion.get("created") or time.time()),
        _Ids(),
    )


# -- streaming: chat chunks -> Responses events ------------------------------------------
class ChatToResponsesStream:
    """Translate one chat stream into Responses SSE frames.

    Feed every upstream event (`feed(SSEEvent | dict)`, or raw bytes with
    `feed_bytes`), then call `finish()` once the upstream stream ends. Each call
    returns the encoded frames to send, in order. `fail()` ends the stream with
    `response.failed` instead.
    """

    def __init__(
        self,
        request: ResponsesRequest | None = None,
        *,
        response_id: str | None = None,
        model: str | None = None,
        created_at: int | None = None,
    ) -> None:
        self.request = request
        self.response_id = response_id or _new_id("resp")
        self.created_at = created_at if created_at is not None else int(time.time())
        self.model = model or (request.model if request else "")
        self.accumulator = StreamAccumulator()
        self.finished = False
        self.final: dict[str, Any] | None = None  # the response of response.completed/.incomplete
        self._parser = SSEParser()
        self._ids = _Ids()
        self._seq = 0
        self._started = False
        self._next_output = 0
        self._reasoning_done = False
        self._reasoning_index: int | None = None
        self._message_index: int | None = None  # output_index of the open message item
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # chat tool index -> stream state

    # -- framing ---------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return encode_sse(payload, event=kind)

    def _shell(self) -> dict[str, Any]:
        return _response_shell(self.request, self.response_id, self.created_at, self.model)

    def start(self) -> list[bytes]:
        """response.created + response.in_progress (sent once; feed() calls it)."""
        if self._started:
            return []
        self._started = True
        return [
            self._event("response.created", response=self._shell()),
            self._event("response.in_progress", response=self._shell()),
        ]

    # -- input -----------------------------------------------------------------------
    def feed_bytes(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        for event in self._parser.feed(chunk):
            out.extend(self.feed(event))
        return out

    def feed(self, event: SSEEvent | dict[str, Any]) -> list[bytes]:
        if self.finished:
            return []
        out = self.start()
        if isinstance(event, SSEEvent):
            chunk = self.accumulator.add_event(event)
        else:
            chunk = event
            self.accumulator.add_chunk(event)
        if not isinstance(chunk, dict):
            return out
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # Responses has a single output: choice 0
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                out.extend(self._open_reasoning())
                out.extend(self._open_message())
                self._text.append(text)
                out.append(
                    self._event(
                        "response.output_text.delta",
                        item_id=self._ids.message,
                        output_index=self._message_index,
                        content_index=0,
                        delta=text,
                        logprobs=[],
                    )
                )
            for pos, call in enumerate(delta.get("tool_calls") or []):
                if isinstance(call, dict):
                    out.extend(self._open_reasoning())
                    out.extend(self._call_delta(call.get("index", pos), call))
        return out

    def _open_reasoning(self) -> list[bytes]:
        """Reasoning arrives before the answer: emit it as one finished item."""
        if self._reasoning_done:
            return []
        self._reasoning_done = True
        text = self.accumulator.reasoning_content
        if not text:
            return []
        index = self._reasoning_index = self._take_output_index()
        item = {
            "type": "reasoning",
            "id": self._ids.reasoning,
            "summary": [],
            "content": [{"type": "reasoning_text", "text": text}],
            "status": "completed",
        }
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _take_output_index(self) -> int:
        index = self._next_output
        self._next_output += 1
        return index

    def _open_message(self) -> list[bytes]:
        if self._message_index is not None:
            return []
        self._message_index = self._take_output_index()
        item = {
            "type": "message",
            "id": self._ids.message,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self._event("response.output_item.added", output_index=self._message_index, item=item),
            self._event(
                "response.content_part.added",
                item_id=self._ids.message,
                output_index=self._message_index,
                content_index=0,
                part=part,
            ),
        ]

    def _call_delta(self, index: int, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        function = call.get("function") or {}
        state = self._calls.get(index)
        if state is None:
            state = {
                "output_index": self._take_output_index(),
                "item_id": self._ids.call(index),
                "call_id": call.get("id") or _new_id("call"),
                "name": function.get("name") or "",
                "arguments": "",
            }
            self._calls[index] = state
            item = {
                "type": "function_call",
                "id": state["item_id"],
                "call_id": state["call_id"],
                "name": state["name"],
                "arguments": "",
                "status": "in_progress",
            }
            out.append(
                self._event("response.output_item.added", output_index=state["output_index"], item=item)
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            state["arguments"] += arguments
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=state["item_id"],
                    output_index=state["output_index"],
                    delta=arguments,
                )
            )
        return out

    # -- the end ---------------------------------------------------------------------
    def finish(self) -> list[bytes]:
        """Close open items and send the final lifecycle event (once)."""
        if self.finished:
            return []
        out = self.start()
        for event in self._parser.close():
            out.extend(self.feed(event))
        if self.accumulator.error is not None:
            error = self.accumulator.error
            message = error.get("message") if isinstance(error, dict) else str(error)
            return out + self.fail(message or "upstream error")
        self.finished = True
        out.extend(self._open_reasoning())
        completion = self.accumulator.to_chat_completion()
        status, _ = _status(self.accumulator.finish_reason)
        if self._message_index is None and not self._calls:
            out.extend(self._open_message())  # an empty answer is still one message item
        if self._message_index is not None:
            text = "".join(self._text)
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            item = {
                "type": "message",
                "id": self._ids.message,
                "role": "assistant",
                "status": status,
                "content": [part],
            }
            out += [
                self._event(
                    "response.output_text.done",
                    item_id=self._ids.message,
                    output_index=self._message_index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=self._ids.message,
                    output_index=self._message_index,
                    content_index=0,
                    part=part,
                ),
                self._event("response.output_item.done", output_index=self._message_index, item=item),
            ]
        for state in self._calls.values():
            item = {
                "type": "function_call",
                "id": state["item_id"],
                "call_id": state["call_id"],
                "name": state["name"] or self._final_call_name(completion, state),
                "arguments": state["arguments"],
                "status": "completed",
            }
            out += [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=state["item_id"],
                    output_index=state["output_index"],
                    arguments=state["arguments"],
                ),
                self._event("response.output_item.done", output_index=state["output_index"], item=item),
            ]
        response = self.final = self._final_response(completion)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        out.append(self._event(kind, response=response))
        return out

    @staticmethod
    def _final_call_name(completion: dict[str, Any], state: dict[str, Any]) -> str:
        for call in completion["choices"][0]["message"].get("tool_calls") or []:
            if call.get("id") == state["call_id"]:
                return call["function"]["name"]
        return ""

    def _final_response(self, completion: dict[str, Any]) -> dict[str, Any]:
        # Keep the streamed call ids so response.completed matches the items already sent.
        message = completion["choices"][0]["message"]
        for index, call in enumerate(message.get("tool_calls") or []):
            state = self._calls.get(index)
            if state is not None:
                call["id"] = state["call_id"]
        response = _build_response(completion, self.request, self.response_id, self.created_at, self._ids)
        # Output order follows the output_index each item was streamed with.
        positions = {state["item_id"]: state["output_index"] for state in self._calls.values()}
        positions[self._ids.message] = -1 if self._message_index is None else self._message_index
        positions[self._ids.reasoning] = -2 if self._reasoning_index is None else self._reasoning_index
        response["output"].sort(key=lambda item: positions.get(item["id"], 10**6))
        return response

    def fail(self, message: str, code: str = "server_error") -> list[bytes]:
        """End the stream with response.failed (e.g. the upstream broke mid-stream)."""
        if self.finished:
            return []
        out = self.start()
        self.finished = True
        response = self._shell()
        response.update(status="failed", error={"code": code, "message": message})
        out.append(self._event("response.failed", response=response))
        return out


__all__ = [
    "ChatToResponsesStream",
    "ResponsesRequest",
    "chat_to_response",
]
