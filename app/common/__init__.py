"""Small helpers shared by every layer of svc-sr (no heavy imports here)."""

from app.common.durations import format_duration, parse_duration

__all__ = ["format_duration", "parse_duration"]
