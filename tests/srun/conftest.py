"""Real `svc-srun run` worker processes for the tests of this directory (tests/srun/workers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.srun.workers import WorkerProcess


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
