"""Duration strings as the reference router's config writes them ("30s", "500ms", "1m30s").

Go-style units are accepted because users copy values from the reference router's
files, which are parsed with Go's `time.ParseDuration`. `0s` means "disabled" by
convention; callers test for `0.0` themselves.
"""

from __future__ import annotations

import math
import re

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
# One "<number><unit>" term; a duration is one or more terms ("1m30s").
_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_BARE_NUMBER = re.compile(r"[+]?(\d+(?:\.\d*)?|\.\d+)")


def parse_duration(value: str | int | float | None) -> float | None:
    """Return `value` in seconds; `None` stays `None`.

    Accepts "30s", "1.5s", "500ms", "2m", "1h", "1m30s", "0s", and bare numbers
    (int, float or numeric string) meaning seconds. Raises ValueError for negative,
    non-finite or unparsable values.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"invalid duration {value!r}: expected a string like '30s' or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"invalid duration {value!r}: must be a finite number of seconds >= 0")
        return seconds
    return _parse_text(value)


def _parse_text(value: str) -> float:
    text = value.strip()
    if not text:
        raise ValueError("invalid duration '': expected a value like '30s', '500ms', '2m' or '1h'")
    if text.startswith("-"):
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    if _BARE_NUMBER.fullmatch(text):
        return float(text)
    total = _sum_terms(text.removeprefix("+"))
    if total is None:
        raise ValueError(
            f"invalid duration {value!r}: expected a value like '30s', '500ms', '2m', '1h' or '1m30s' "
            "(units ns, us, ms, s, m, h)"
        )
    if not math.isfinite(total):
        raise ValueError(f"invalid duration {value!r}: too large")
    return total


def _sum_terms(body: str) -> float | None:
    """Seconds of a run of "<number><unit>" terms covering all of `body` (None: it is not one)."""
    total = 0.0
    pos = 0
    for match in _TERM.finditer(body):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(body) and pos > 0 else None


def format_duration(seconds: float) -> str:
    """Shortest readable duration string for `seconds` ("250ms", "30s", "1.5s")."""
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"cannot format duration {seconds!r}")
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{_plain(seconds * 1000)}ms"
    return f"{_plain(seconds)}s"


def _plain(number: float) -> str:
    # Never scientific notation: "1e+06s" would not parse back.
    return f"{number:.6f}".rstrip("0").rstrip(".")
