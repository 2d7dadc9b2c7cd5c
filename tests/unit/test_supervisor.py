"""SupervisedProcess restarts a dying child with back-off and stops it cleanly."""

from __future__ import annotations

import sys
import time

from app.common.supervisor import SupervisedProcess


def _wait(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_dead_child_is_restarted() -> None:
    proc = SupervisedProcess("dies", [sys.executable, "-c", "import sys; sys.exit(3)"], min_backoff_s=0.05)
    proc.start()
    try:
        assert _wait(lambda: proc.restarts >= 2)
    finally:
        proc.stop()
    assert not proc.alive()


def test_stop_terminates_then_kills_a_child_that_ignores_sigterm() -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    proc = SupervisedProcess("stubborn", [sys.executable, "-c", code], stop_timeout_s=0.5).start()
    time.sleep(0.5)
    assert proc.alive()
    started = time.monotonic()
    exit_code = proc.stop()
    assert exit_code == -9  # SIGKILL after the grace period
    assert time.monotonic() - started < 5
    assert proc.restarts == 0


def test_stop_of_a_cooperative_child_is_a_clean_sigterm() -> None:
    proc = SupervisedProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"]).start()
    assert _wait(proc.alive)
    assert proc.stop() == -15
