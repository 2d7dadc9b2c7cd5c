"""`svc-sr keys`: create, list and revoke against a live management API (uvicorn in a thread over
the in-process app)."""

from __future__ import annotations

import json

import pytest

from app.cli.remote import EXIT_INVALID, EXIT_NOT_FOUND
from tests.unit.cli import test_cli_config as cli_support
from tests.unit.cli.test_cli_config import server, upstream  # noqa: F401  (the module's fixtures)


@pytest.mark.slow
def test_keys_create_list_revoke(server: cli_support.Server) -> None:  # noqa: F811
    ep = ("--endpoint", server.url)
    model = server.harness.config.providers.models[0].name
    created = cli_support.run(
        "keys", "create", "ci", "--model", model, "--budget-usd", "5", "--period", "day", *ep
    )
    assert created.exit_code == 0, created.output
    issued = json.loads(created.output)
    assert issued["key"].startswith("sk-svc-") and issued["budget"] == {"usd": 5.0, "period": "day"}
    listed = cli_support.run("keys", "list", *ep)
    assert issued["id"] in listed.output and "0.0000/5.0 USD per day" in listed.output
    assert issued["key"] not in listed.output
    assert cli_support.run("keys", "create", "x", "--model", "no-such-model", *ep).exit_code == EXIT_INVALID
    assert cli_support.run("keys", "revoke", issued["id"], *ep).exit_code == 0
    assert cli_support.run("keys", "revoke", issued["id"], *ep).exit_code == EXIT_NOT_FOUND
    assert issued["id"] not in cli_support.run("keys", "list", *ep).output
