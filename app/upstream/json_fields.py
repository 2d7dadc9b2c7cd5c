"""Typed reads of loosely shaped JSON (upstream bodies and events may hold anything)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def object_field(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """`data[key]` when it is a JSON object, else an empty one."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def int_field(data: Mapping[str, Any], key: str, default: int) -> int:
    """`data[key]` when it is an integer, else `default`."""
    value = data.get(key)
    return value if isinstance(value, int) else default
