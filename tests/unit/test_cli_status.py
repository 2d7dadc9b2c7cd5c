"""`svc-sr status --endpoint`: health, startup readiness and the serving configuration of a
running management API (a real uvicorn server on 127.0.0.1), exit 3 when nothing answers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from tests.fakes.upstream import find_free_port
from tests.unit.test_cli_config import Server
from tests.unit.test_management_support import Harness, base_document


@pytest.fixture
def server(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.chdir(tmp_path)  # no local `svc-sr serve` state file here
    with Server(Harness(base_document())) as running:
        yield running


def test_status_of_a_remote_endpoint(server: Server) -> None:
    result = CliRunner().invoke(cli, ["status", "--endpoint", server.url], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["running"] is True and report["endpoint"] == server.url
    assert report["health"] == {"status": "ok"}
    assert report["ready"]["phase"] == "complete" and report["ready"]["ready"] is True
    assert report["active_config"]["config_version"] == 1 and report["active_config"]["activation_status"] == "active"


def test_status_exit_3_when_nothing_answers(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["status", "--endpoint", f"http://127.0.0.1:{find_free_port()}"])
    assert result.exit_code == 3
    assert json.loads(result.stdout)["health"]["status"] == "unreachable"
    assert CliRunner().invoke(cli, ["status"]).exit_code == 3  # no endpoint, no local instance
