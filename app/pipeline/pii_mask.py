"""PII mask and restore: the `pii` plugin's `action: mask` (docs/security.md "PII actions").

Before the upstream, each detected value in the request's messages becomes a stable placeholder
(`<EMAIL_ADDRESS_1>`: the same value is the same placeholder within one request); the answer
gets the originals back on its way to the client, a whole answer (`restore_completion`) or a
stream (`StreamRestorer`: a placeholder split across chunks is held back until it is whole).

What the router keeps of a masked request (the cache is bypassed, the replay record and the
completion's answer are the masked texts) never holds an original: only `PIIMask` does, and it
never prints them (its repr and its dump leave the values out).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from app.upstream.sse import SSEEvent, SSEParser, encode_sse

# A placeholder the router writes: the type in capitals, then a per-type ordinal.
PLACEHOLDER = re.compile(r"<[A-Z][A-Z_]*_[0-9]+>")


class PIIMask(BaseModel):
    """Placeholder -> original, for one request. The originals travel with the plan to the
    front door that restores them; dumps and reprs carry only the placeholders."""

    originals: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    placeholders: list[str] = Field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.originals)

    @property
    def longest(self) -> int:
        return max((len(p) for p in self.originals), default=0)


def build_mask(found: Iterable[tuple[str, str]]) -> PIIMask:
    """A mask over (type, value) pairs: the same value gets the same placeholder, numbered per
    type in order of first appearance. Blank values are skipped."""
    by_value: dict[str, str] = {}
    counts: dict[str, int] = {}
    for kind, value in found:
        value = value.strip()
        if not value or value in by_value:
            continue
        label = re.sub(r"[^A-Z_]", "_", kind.upper()) or "PII"
        counts[label] = counts.get(label, 0) + 1
        by_value[value] = f"<{label}_{counts[label]}>"
    originals = {placeholder: value for value, placeholder in by_value.items()}
    return PIIMask(originals=originals, placeholders=list(originals))


def mask_text(text: str, mask: PIIMask) -> str:
    """Every occurrence of every masked value replaced, longest value first (a value inside a
    longer one never splits it)."""
    for placeholder, value in sorted(mask.originals.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(value, placeholder)
    return text


def restore_text(text: str, mask: PIIMask) -> str:
    if "<" not in text:
        return text
    return PLACEHOLDER.sub(lambda m: mask.originals.get(m.group(0), m.group(0)), text)


def mask_body(body: dict[str, Any], mask: PIIMask) -> None:
    """Mask the chat body's message texts: string contents, the text of content parts, and
    tool-call arguments (the model reads them all). The messages are copied first: the plan's
    body shares them with the caller's (a shallow copy), which must keep the client's words."""
    body["messages"] = copy.deepcopy(body.get("messages") or [])
    for message in body["messages"]:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = mask_text(content, mask)
        elif isinstance(content, list):
            for part in content:
                _mask_part(part, mask)
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                function["arguments"] = mask_text(function["arguments"], mask)


def _mask_part(part: Any, mask: PIIMask) -> None:
    if not isinstance(part, dict):
        return
    if isinstance(part.get("text"), str):
        part["text"] = mask_text(part["text"], mask)
    inner = part.get("content")  # a tool_result part's content: a string or parts
    if isinstance(inner, str):
        part["content"] = mask_text(inner, mask)
    elif isinstance(inner, list):
        for item in inner:
            _mask_part(item, mask)


def restore_completion(payload: dict[str, Any], mask: PIIMask) -> dict[str, Any]:
    """A copy of a chat.completion with the originals back in each choice's message (content,
    reasoning, tool-call arguments); the payload given is left masked (the router keeps it)."""
    out = copy.deepcopy(payload)
    for choice in out.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            _restore_fields(message, mask)
    return out


def _restore_fields(message: dict[str, Any], mask: PIIMask) -> None:
    for key in ("content", "reasoning_content"):
        if isinstance(message.get(key), str):
            message[key] = restore_text(message[key], mask)
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            function["arguments"] = restore_text(function["arguments"], mask)


class TextRestorer:
    """One streamed text: restores whole placeholders and holds back a tail that may be the
    start of one (at most the longest placeholder's length), until the next piece or the end."""

    def __init__(self, mask: PIIMask) -> None:
        self._mask = mask
        self._held = ""

    def feed(self, piece: str) -> str:
        text = self._held + piece
        self._held = ""
        cut = text.rfind("<")
        if cut >= 0 and len(text) - cut < self._mask.longest and self._may_start(text[cut:]):
            text, self._held = text[:cut], text[cut:]
        return restore_text(text, self._mask)

    def flush(self) -> str:
        text, self._held = self._held, ""
        return restore_text(text, self._mask)

    def _may_start(self, tail: str) -> bool:
        return any(p.startswith(tail) and p != tail for p in self._mask.originals)


# The delta fields a chat chunk streams text in.
STREAMED_FIELDS = ("content", "reasoning_content")


class StreamRestorer:
    """Chat-completion SSE bytes in, the same stream with the originals restored out: each
    choice's streamed fields pass a `TextRestorer`; held text is released on the choice's
    finish_reason, and whatever is left at the stream's end (or [DONE]) as one more chunk."""

    def __init__(self, mask: PIIMask) -> None:
        self._mask = mask
        self._parser = SSEParser()
        self._texts: dict[tuple[int, str], TextRestorer] = {}
        self._last: dict[str, Any] = {}  # the last chunk's id/model/created, for a closing chunk

    def feed(self, raw: bytes) -> bytes:
        return b"".join(self._event(e) for e in self._parser.feed(raw))

    def finish(self) -> bytes:
        tail = b"".join(self._event(e) for e in self._parser.close())
        return tail + self._release()

    def _event(self, event: SSEEvent) -> bytes:
        if event.is_done:
            return self._release() + encode_sse(event.data, event.event)
        try:
            chunk = event.json()
        except ValueError:
            return encode_sse(event.data, event.event)
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list):
            return encode_sse(event.data, event.event)
        self._last = {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
        for choice in chunk["choices"]:
            if isinstance(choice, dict):
                self._restore_choice(choice)
        return encode_sse(chunk, event.event)

    def _restore_choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index", 0) if isinstance(choice.get("index"), int) else 0
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        ending = choice.get("finish_reason") is not None
        for name in STREAMED_FIELDS:
            restorer = self._texts.get((index, name))
            piece = delta.get(name)
            if isinstance(piece, str):
                if restorer is None:
                    restorer = self._texts[(index, name)] = TextRestorer(self._mask)
                delta[name] = restorer.feed(piece)
            if ending and restorer is not None:
                held = restorer.flush()
                if held:
                    delta[name] = (delta.get(name) or "") + held
        for call in delta.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                function["arguments"] = restore_text(function["arguments"], self._mask)

    def _release(self) -> bytes:
        """Held text no finish_reason released: one chunk per choice that still holds some."""
        out = b""
        for (index, name), restorer in sorted(self._texts.items()):
            held = restorer.flush()
            if held:
                chunk = {**self._last, "choices": [{"index": index, "delta": {name: held}}]}
                out += encode_sse(chunk)
        return out


def mask_summary(mask: PIIMask | None) -> dict[str, Any] | None:
    """What routing_metadata and the replay record may say of a mask: counts, never values."""
    if not mask:
        return None
    return {"masked": len(mask.originals), "placeholders": sorted(mask.placeholders)}


__all__ = [
    "PLACEHOLDER",
    "PIIMask",
    "StreamRestorer",
    "TextRestorer",
    "build_mask",
    "mask_body",
    "mask_summary",
    "mask_text",
    "restore_completion",
    "restore_text",
]
