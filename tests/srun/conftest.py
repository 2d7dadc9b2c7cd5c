"""Real `svc-srun run` worker processes for the tests of this directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
            cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )

    def client(self, **kw: object) -> httpx.Client:
        if self.uds:
            return httpx.Client(transport=httpx.HTTPTransport(uds=str(self.uds)), base_url="http://srun", **kw)  # type: ignore[arg-type]
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", **kw)  # type: ignore[arg-type]

    def async_client(self, **kw: object) -> httpx.AsyncClient:
        if self.uds:
            return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(self.uds)), base_url="http://srun", **kw)  # type: ignore[arg-type]
        return httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", **kw)  # type: ignore[arg-type]

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


@pytest.fixture(scope="module")
def worker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    started: list[WorkerProcess] = []

    def start(args: list[str], uds: bool = False) -> WorkerProcess:
        base = tmp_path_factory.mktemp("srun")
        worker = WorkerProcess(args, base / "worker.log", base / "w.sock" if uds else None)
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
