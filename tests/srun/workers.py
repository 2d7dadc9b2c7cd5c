"""Real `svc-srun run` worker processes, for tests/srun and tests/integration/srun."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from app.common.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One worker started with `python -m app.cli.srun run ...`, stopped with SIGTERM."""

    def __init__(self, args: list[str], log: Path, uds: Path | None = None) -> None:
        self.uds = uds
        self.port = None if uds else free_port()
        where = ["--uds", str(uds)] if uds else ["--port", str(self.port)]
        self.log = log
        env = {**os.environ, "SVC_SR_ENCODER_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli.srun", "run", *args, *where, "--log-level", "warning"],
            cwd=ROOT,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def client(self, **kw: Any) -> httpx.Client:
        if self.uds:
            return httpx.Client(
                transport=httpx.HTTPTransport(uds=str(self.uds)), base_url="http://srun", **kw
            )
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", **kw)

    def async_client(self, **kw: Any) -> httpx.AsyncClient:
        if self.uds:
            return httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=str(self.uds)), base_url="http://srun", **kw
            )
        return httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", **kw)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self.client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited: {self.log.read_text()[-2000:]}")
                try:
                    if client.get("/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise TimeoutError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
