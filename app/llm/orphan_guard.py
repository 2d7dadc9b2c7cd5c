"""Stop a replica's engine processes when the replica dies without stopping them.

vLLM starts its engine core and workers as child processes. A replica that Serve stops
shuts them down (VLLMEngine.shutdown); one killed outright (SIGKILL, a lost node's raylet,
`ray.kill`) leaves them running, a few GiB each, reparented to init. So the replica starts
this watchdog first: a separate process (its own session, out of the replica's process
group) that notes the replica's descendants every second and, once the replica is gone,
SIGKILLs the ones still alive (a pid is checked against its start time, never a reused one).

    python -m app.llm.orphan_guard REPLICA_PID [REPORT_FILE]

REPORT_FILE, when given, holds the pids noted so far (rewritten after each look): what the
guard would kill, for whoever wants to know (its test waits for it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 1.0
Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> set[Process]:
    """Every live process below `root`, with its start time."""
    parents: dict[int, list[Process]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            parents.setdefault(stat[0], []).append((int(entry), stat[1]))
    found: set[Process] = set()
    stack = [root]
    while stack:
        for child in parents.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child[0])
    return found


def kill_survivors(processes: set[Process]) -> list[int]:
    """SIGKILL each process that is still the one noted (same pid and start time)."""
    killed = []
    for pid, started in processes:
        stat = _stat(pid)
        if stat is not None and stat[1] == started:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                continue
    return killed


def watch(replica: int, poll_s: float = POLL_S, report: Path | None = None) -> list[int]:
    """Note `replica`'s descendants until it is gone, then kill those left; the pids killed."""
    me = os.getpid()
    noted: set[Process] = set()
    while _stat(replica) is not None:
        fresh = {p for p in descendants(replica) if p[0] != me} - noted
        if fresh:
            noted |= fresh
            if report is not None:
                tmp = report.with_suffix(".tmp")
                tmp.write_text(" ".join(str(pid) for pid, _ in sorted(noted)))
                os.replace(tmp, report)
        time.sleep(poll_s)
    return kill_survivors(noted)


def start_guard(replica: int | None = None, report: Path | None = None) -> subprocess.Popen[bytes]:
    """The watchdog of `replica` (default: this process), in its own session."""
    target = os.getpid() if replica is None else replica
    return subprocess.Popen(
        [sys.executable, "-m", "app.llm.orphan_guard", str(target), *([str(report)] if report else [])],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


if __name__ == "__main__":
    watch(int(sys.argv[1]), report=Path(sys.argv[2]) if len(sys.argv) > 2 else None)
