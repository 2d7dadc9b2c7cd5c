"""Stopping what a test's own Ray instance started: every process whose command line names the
instance's directory (raylet, GCS, dashboard, workers). `ray stop` would stop every Ray instance
on the machine, the test session's own included."""

from __future__ import annotations

import os
import signal


def kill_processes_naming(fragment: str) -> None:
    """SIGKILL every process (but this one) whose command line contains `fragment`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().decode(errors="replace")
            if fragment in cmdline and int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue
