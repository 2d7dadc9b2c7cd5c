"""Processes a test or benchmark starts: waiting until one answers over HTTP, and stopping what
a test's own Ray instance started (every process whose command line names the instance's
directory: raylet, GCS, dashboard, workers; `ray stop` would stop every Ray instance on the
machine, the test session's own included)."""

from __future__ import annotations

import os
import signal
import time

import httpx


def wait_http_ok(url: str, timeout_s: float, poll_s: float = 0.5) -> None:
    """Return once GET `url` answers 200; RuntimeError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(poll_s)
    raise RuntimeError(f"{url} not ready after {timeout_s}s")


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
