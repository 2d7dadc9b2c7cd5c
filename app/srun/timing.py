"""`Server-Timing` on every worker answer, errors included (docs/model-runtime.md): phases parse, tokenize,
queue, forward, post, serialize and total, durations in ms."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from app.runtime.schemas import Timings

PHASES = ("parse", "tokenize", "queue", "forward", "post", "serialize")


@dataclass
class ServerTiming:
    started: float = field(default_factory=time.perf_counter)
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def add(self, phase: str, ms: float) -> None:
        self.phases[phase] = self.phases.get(phase, 0.0) + max(0.0, ms)

    def absorb(self, timings: Timings) -> None:
        """Take the engine's phases (tokenize, queue, forward, post)."""
        self.add("tokenize", timings.tokenize_ms)
        self.add("queue", timings.queue_ms)
        self.add("forward", timings.forward_ms)
        self.add("post", timings.post_ms)

    def replace_engine_phases(self, timings: Timings) -> None:
        """A bundle reports the engine phases of the task that answered last."""
        for phase in ("tokenize", "queue", "forward", "post"):
            self.phases[phase] = 0.0
        self.absorb(timings)

    def total_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def header(self) -> str:
        parts = [f"{name};dur={self.phases.get(name, 0.0):.3f}" for name in PHASES]
        parts.append(f"total;dur={self.total_ms():.3f}")
        return ", ".join(parts)


def parse_server_timing(value: str | None) -> dict[str, float]:
    """`name;dur=1.5, other;dur=2` -> {name: ms}; unknown parameters and bad numbers are skipped."""
    out: dict[str, float] = {}
    for part in (value or "").split(","):
        name, *params = [p.strip() for p in part.split(";")]
        for param in params:
            key, _, raw = param.partition("=")
            if name and key.strip() == "dur":
                with contextlib.suppress(ValueError):
                    out[name] = float(raw.strip().strip('"'))
    return out
