"""SupervisedProcess restarts a dying child with back-off and stops it cleanly."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.common.supervisor import RestartPolicy, SupervisedProcess

# Children wait for a signal (signal.pause), not for a fixed time.
STUBBORN = (
    "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); signal.pause()"
)
COOPERATIVE = "import signal; print('up', flush=True); signal.pause()"
WAIT_S = 30.0  # an upper bound for a condition to come true on a loaded machine, never a speed check


def _until(condition: Callable[[], bool]) -> bool:
    """Wait for `condition` (polled: a child process's state has no event to wait on)."""
    deadline = time.monotonic() + WAIT_S
    poll = threading.Event()
    while not condition():
        if time.monotonic() >= deadline:
            return False
        poll.wait(0.02)
    return True


def _up(log: Path) -> Callable[[], bool]:
    return lambda: log.exists() and "up" in log.read_text()


class RecordingProcess(SupervisedProcess):
    """Records the forced stop instead of only logging it."""

    killed: list[int]

    def _on_kill(self, process: subprocess.Popen[bytes]) -> None:
        self.killed = [*getattr(self, "killed", []), process.pid]


def test_a_dead_child_is_restarted() -> None:
    restarted = threading.Event()

    def on_restart(restarts: int) -> None:
        if restarts >= 2:
            restarted.set()

    proc = SupervisedProcess(
        "dies",
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        policy=RestartPolicy(min_backoff_s=0.05),
        on_restart=on_restart,
    )
    proc.start()
    try:
        assert restarted.wait(WAIT_S)
    finally:
        proc.stop()
    assert proc.restarts >= 2
    assert not proc.alive()


@pytest.mark.slow
def test_stop_terminates_then_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    proc = RecordingProcess(
        "stubborn", [sys.executable, "-c", STUBBORN], log_path=log, policy=RestartPolicy(stop_timeout_s=0.5)
    ).start()
    assert _until(_up(log))  # SIGTERM is ignored from here on
    assert proc.alive()
    pid = proc.process.pid if proc.process else None
    exit_code = proc.stop()
    assert exit_code == -9  # SIGKILL after the grace period
    assert proc.killed == [pid]
    assert proc.restarts == 0


def test_stop_of_a_cooperative_child_is_a_clean_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "sleeper.log"
    proc = RecordingProcess("sleeper", [sys.executable, "-c", COOPERATIVE], log_path=log).start()
    assert _until(_up(log))
    assert proc.stop() == -15
    assert getattr(proc, "killed", []) == []
