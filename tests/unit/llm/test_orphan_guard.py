"""app/llm/orphan_guard.py with real processes: a replica killed outright takes its engine's
processes with it; a pid is only killed while it is the process that was noted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.llm.orphan_guard import _stat, descendants, kill_survivors

ROOT = Path(__file__).resolve().parents[3]
# A stand-in replica: starts its guard, then an "engine" child (and grandchild), prints their pids.
REPLICA = """
import subprocess, sys, time
from pathlib import Path
from app.llm.orphan_guard import start_guard
guard = start_guard(report=Path(sys.argv[1]))
engine = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']);"
    "print(w.pid, flush=True); time.sleep(300)"], stdout=subprocess.PIPE, text=True)
worker = engine.stdout.readline().strip()
print(guard.pid, engine.pid, worker, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[:1]


def _wait_until(condition: object, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_a_replica_killed_outright_takes_its_engine_processes_with_it(tmp_path: Path) -> None:
    report = tmp_path / "noted"
    replica = subprocess.Popen(
        [sys.executable, "-c", REPLICA, str(report)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert replica.stdout is not None
    guard, engine, worker = (int(p) for p in replica.stdout.readline().split())
    assert {engine, worker} <= {pid for pid, _ in descendants(replica.pid)}

    def noted() -> bool:
        return report.exists() and {str(engine), str(worker)} <= set(report.read_text().split())

    assert _wait_until(noted), "the guard never noted the engine's processes"
    os.kill(replica.pid, signal.SIGKILL)
    replica.wait()
    assert _wait_until(lambda: not _alive(engine) and not _alive(worker)), (
        "engine processes outlived the replica"
    )
    assert _wait_until(lambda: not _alive(guard))  # and the guard ends with its work done


def test_only_the_noted_process_is_killed_never_a_reused_pid() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        stat = _stat(sleeper.pid)
        assert stat is not None
        assert kill_survivors({(sleeper.pid, stat[1] + 1)}) == []  # another start time: not ours
        assert sleeper.poll() is None
        assert kill_survivors({(sleeper.pid, stat[1])}) == [sleeper.pid]
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
