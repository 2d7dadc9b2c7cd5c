"""Deadline arithmetic shared by the attempt loop and the transport (monotonic seconds)."""

from __future__ import annotations


def min_deadline(*deadlines: float | None) -> float | None:
    """The earliest of the deadlines that are set; None when none is."""
    present = [d for d in deadlines if d is not None]
    return min(present) if present else None


def resolve_timeout(configured: float | None, default: float | None) -> float | None:
    """Seconds in force: unset -> default; 0 (disabled) -> None (no limit)."""
    if configured is None:
        return default if default else None
    return configured or None


def time_left(deadline: float | None, now: float, cap: float | None = None) -> float | None:
    """Seconds until `deadline` (never negative), at most `cap`; None: no limit."""
    if deadline is None:
        return cap
    left = max(0.0, deadline - now)
    return left if cap is None else min(left, cap)
