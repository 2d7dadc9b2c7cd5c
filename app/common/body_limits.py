"""The limits of every request body the API reads, and its one JSON decoder
(docs/management-api.md, "Limits"; configured in global.services.data_plane).

Standard JSON (RFC 8259) in UTF-8, and nothing the rest of the product cannot carry: a body
that is not valid JSON, not valid UTF-8, holds a lone UTF-16 surrogate escape (`"\\ud800"`:
no UTF-8 encoding exists for it, so every later encode would fail), a non-finite number
(`NaN`, `1e400`: no JSON encoding exists for it), or nests deeper than `max_depth` levels is
refused with `JsonRejected`, which each door answers 400 in its own error body. Other control
characters, escaped, are text like any other and pass (raw ones are invalid JSON).

The decoder is pydantic-core's (jiter): no Python recursion, so a document nested 50,000
levels deep is refused at its own limit (HARD_MAX_DEPTH) instead of overflowing the stack.
"""

from __future__ import annotations

import math
from typing import Any

import pydantic_core

# A 5 MB prompt is refused (413) at either front door; a bigger limit can be configured up
# to MAX_BODY_BYTES_LIMIT, which the graph's handle calls carry (app/common/ray_settings.py).
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_BODY_BYTES_LIMIT = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64
MIN_MAX_DEPTH = 16  # a chat body with tools and content parts nests about 10 levels
# pydantic-core's own recursion limit: a configured depth cannot exceed it.
HARD_MAX_DEPTH = 200
_BOM = b"\xef\xbb\xbf"


class JsonRejected(ValueError):
    """The body is not JSON the API accepts; the message says why (for a 400). `malformed`:
    not JSON at all (each door words that case its own way)."""

    def __init__(self, message: str, malformed: bool = False, too_deep: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed
        self.too_deep = too_deep


def decode_json(raw: bytes | bytearray | str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """`raw` decoded, or JsonRejected."""
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRejected("a lone UTF-16 surrogate: no UTF-8 text holds it") from None
    raw = raw.removeprefix(_BOM)  # tolerated, as RFC 8259 allows (json.loads did too)
    try:
        value = pydantic_core.from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        reason = str(exc)
        if "recursion limit" in reason:
            raise JsonRejected(_too_deep(max_depth), too_deep=True) from None
        if "surrogate" in reason or "hex escape" in reason:
            raise JsonRejected(
                f"a lone UTF-16 surrogate escape, which no UTF-8 text holds ({reason})"
            ) from None
        raise JsonRejected(f"not valid JSON ({reason})", malformed=True) from None
    check_decoded(value, max_depth)
    return value


def check_decoded(value: Any, max_depth: int) -> None:
    """JsonRejected when `value` nests deeper than `max_depth` or holds a non-finite number."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise JsonRejected("a number too large for a double (no JSON encoding exists for it)")
            continue
        elif not isinstance(node, list):
            continue
        if depth >= max_depth:
            raise JsonRejected(_too_deep(max_depth), too_deep=True)
        stack.extend((child, depth + 1) for child in node if isinstance(child, dict | list | float))


def _too_deep(max_depth: int) -> str:
    return f"nested deeper than {max_depth} levels"


def rejection_message(exc: JsonRejected) -> str:
    """How the API words a refused body (`max_json_depth` is the configured limit's key)."""
    if exc.malformed:
        return f"request body is {exc}"
    limit = " (global.services.data_plane.max_json_depth)" if exc.too_deep else ""
    return f"invalid JSON body: {exc}{limit}"
