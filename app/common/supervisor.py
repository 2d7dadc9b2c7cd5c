"""Keeps a child process running: restarts it with exponential back-off when it dies,
stops it with SIGTERM, then SIGKILL after a grace period."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("svc_sr.supervisor")


@dataclass(frozen=True)
class RestartPolicy:
    """When a supervised process is restarted, and how long a stop waits before SIGKILL."""

    min_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    stop_timeout_s: float = 10.0
    healthy_after_s: float = 30.0  # a run this long resets the back-off


class SupervisedProcess:
    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
        policy: RestartPolicy | None = None,
        on_restart: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.env = env
        self.policy = policy or RestartPolicy()
        self.on_restart = on_restart
        self.restarts = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def _spawn(self) -> None:
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = {**os.environ, **(self.env or {})}
        self.process = subprocess.Popen(
            self.command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def start(self) -> SupervisedProcess:
        with self._lock:
            self._stop.clear()
            self._spawn()
        self._watcher = threading.Thread(target=self._watch, name=f"supervise-{self.name}", daemon=True)
        self._watcher.start()
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _watch(self) -> None:
        backoff = self.policy.min_backoff_s
        started = time.monotonic()
        while not self._stop.is_set():
            process = self.process
            if process is None or self._stop.wait(0.2):
                continue
            code = process.poll()
            if code is None:
                continue
            if time.monotonic() - started >= self.policy.healthy_after_s:
                backoff = self.policy.min_backoff_s
            log.warning("%s exited with %s; restarting in %.0f s", self.name, code, backoff)
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, self.policy.max_backoff_s)
            with self._lock:
                if self._stop.is_set():
                    return
                self._spawn()
                self.restarts += 1
                started = time.monotonic()
            if self.on_restart is not None:
                self.on_restart(self.restarts)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after stop_timeout_s; returns the exit code."""
        self._stop.set()
        with self._lock:
            process, self.process = self.process, None
        if self._watcher is not None:
            self._watcher.join(timeout=2)
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout=self.policy.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._on_kill(process)
                process.kill()
                return process.wait()
        return process.returncode

    def _on_kill(self, process: subprocess.Popen[bytes]) -> None:
        """Logged when a process ignored SIGTERM for stop_timeout_s (subclasses name the event)."""
        log.warning("%s ignored SIGTERM for %.0f s: killed", self.name, self.policy.stop_timeout_s)
