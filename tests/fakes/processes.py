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
    """SIGKILL every process (but this one) whose command line contains `fragment`, and every
    process in their process groups: Ray's dashboard and runtime-env agents rename themselves
    (`ray::DashboardAgent`), so only their group leads back to the instance."""
    own_group = os.getpgrp()
    matched: set[int] = set()
    for pid, cmdline in _command_lines():
        if fragment in cmdline and pid != os.getpid():
            matched.add(pid)
    groups = {group for group in map(_process_group, matched) if group not in (None, own_group)}
    for pid, _ in _command_lines():
        if pid != os.getpid() and (pid in matched or _process_group(pid) in groups):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue


def _command_lines() -> list[tuple[int, str]]:
    lines = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                lines.append((int(pid), fh.read().decode(errors="replace")))
        except OSError:
            continue
    return lines


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
