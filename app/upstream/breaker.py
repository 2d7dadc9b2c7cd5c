"""Circuit breakers per (model, backend), only in force with `fallback.circuit_breaker`.

closed -> (consecutive_failures) -> open for cooldown_period -> half-open: up to
half_open_probes attempts at once; a success closes it, a failure reopens it.
The configuration comes with each call (recipes may differ); the state is the process's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.config.reliability import CircuitBreakerConfig
from app.upstream.targets import UpstreamTarget


@dataclass
class _State:
    failures: int = 0
    open_until: float = 0.0
    probes: int = 0


class CircuitBreakers:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._states: dict[tuple[str, str], _State] = {}

    def _tripped(self, config: CircuitBreakerConfig | None, target: UpstreamTarget) -> _State | None:
        state = self._states.get((target.model, target.base_url))
        if config is None or state is None or state.failures < config.consecutive_failures:
            return None
        return state

    def is_open(self, config: CircuitBreakerConfig | None, target: UpstreamTarget) -> bool:
        state = self._tripped(config, target)
        if state is None or config is None:
            return False
        return state.open_until > self._clock() or state.probes >= config.half_open_probes

    def enter(self, config: CircuitBreakerConfig | None, target: UpstreamTarget) -> bool:
        """Counts a half-open probe; returns whether this attempt is one."""
        state = self._tripped(config, target)
        if state is None:
            return False
        state.probes += 1
        return True

    def record(
        self, config: CircuitBreakerConfig | None, target: UpstreamTarget, *, ok: bool, probe: bool
    ) -> None:
        if config is None:
            return
        state = self._states.setdefault((target.model, target.base_url), _State())
        if probe:
            state.probes = max(0, state.probes - 1)
        if ok:
            state.failures, state.open_until = 0, 0.0
            return
        state.failures += 1
        if state.failures >= config.consecutive_failures:
            state.open_until = self._clock() + config.cooldown_s
