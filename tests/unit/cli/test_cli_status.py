"""`svc-sr status --endpoint`: health, startup readiness and the serving configuration of a
running management API (a real uvicorn server on 127.0.0.1), exit 3 when nothing answers; a
local `svc-sr serve` that is still starting: reported, not started twice, stoppable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from app.cli.serve import ServeState
from app.common.ports import free_port
from tests.unit.cli.test_cli_config import Server
from tests.unit.management.test_management_support import Harness, base_document


@pytest.fixture
def server(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.chdir(tmp_path)  # no local `svc-sr serve` state file here
    with Server(Harness(base_document())) as running:
        yield running


@pytest.mark.slow
def test_status_of_a_remote_endpoint(server: Server) -> None:
    result = CliRunner().invoke(cli, ["status", "--endpoint", server.url], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["running"] is True and report["endpoint"] == server.url
    assert report["health"] == {"status": "ok"}
    assert report["ready"]["phase"] == "complete" and report["ready"]["ready"] is True
    assert (
        report["active_config"]["config_version"] == 1
        and report["active_config"]["activation_status"] == "active"
    )


def test_status_exit_3_when_nothing_answers(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["status", "--endpoint", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 3
    assert json.loads(result.stdout)["health"]["status"] == "unreachable"
    assert CliRunner().invoke(cli, ["status"]).exit_code == 3  # no endpoint, no local instance


@pytest.mark.slow
def test_a_start_in_progress_is_reported_refuses_a_second_serve_and_can_be_stopped(
    server: Server, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `svc-sr serve` writes its state as "starting" before Ray runs (cwd is tmp_path here).
    ServeState(os.getpid(), "configs/config.yaml", server.url, time.time(), phase="starting").write()
    status = CliRunner().invoke(cli, ["status"], catch_exceptions=False)
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["phase"] == "starting"

    (tmp_path / "config.yaml").write_text("version: v0.3\n")
    second = CliRunner().invoke(cli, ["serve", "--config", str(tmp_path / "config.yaml")])
    assert second.exit_code == 1 and "already running" in second.output and "starting" in second.output

    # A child of this process: once stopped it stays a zombie until reaped below, which
    # `stop` must count as stopped (as for a serve that a script or supervisor started).
    starting = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        ServeState(starting.pid, "configs/config.yaml", server.url, time.time(), phase="starting").write()
        stopped = CliRunner().invoke(cli, ["stop", "--timeout", "10"])
        assert stopped.exit_code == 0 and "svc-sr stopped" in stopped.output
        assert starting.wait(timeout=5) == -signal.SIGTERM
    finally:
        starting.kill()
