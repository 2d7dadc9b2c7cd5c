"""`svc-sr storage`: upload, vector-stores create/list/show/attach/search/delete and rotate
against a live management API (uvicorn in a thread over the in-process app)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.remote import EXIT_ACTIVATION_FAILED, EXIT_NOT_FOUND
from app.config.storage import VectorStoreConfig
from app.storage import open_storage
from tests.fakes.embedding import hashed_embed
from tests.unit.cli import test_cli_config as cli_support


@pytest.fixture
def server(tmp_path: Path) -> Iterator[cli_support.Server]:
    storage = open_storage(VectorStoreConfig(directory=str(tmp_path / "state")), tmp_path, embed=hashed_embed)
    with cli_support.Server(cli_support.Harness(storage=storage)) as running:
        yield running


@pytest.mark.slow
def test_vector_store_commands_round_trip(server: cli_support.Server, tmp_path: Path) -> None:
    ep = ("--endpoint", server.url)
    doc = tmp_path / "guide.md"
    doc.write_text("The espresso machine needs descaling every month with citric acid.")
    uploaded = cli_support.run("storage", "upload", str(doc), *ep)
    assert uploaded.exit_code == 0, uploaded.output
    file_id = json.loads(uploaded.output)["id"]
    created = cli_support.run("storage", "vector-stores", "create", "--name", "manuals", *ep)
    store_id = json.loads(created.output)["id"]
    attached = cli_support.run(
        "storage", "vector-stores", "attach", store_id, file_id, "--attribute", "lang=en", *ep
    )
    assert attached.exit_code == 0 and json.loads(attached.output)["attributes"] == {"lang": "en"}
    for _ in range(200):
        shown = json.loads(cli_support.run("storage", "vector-stores", "show", store_id, *ep).output)
        if shown["files"][0]["status"] != "in_progress":
            break
        time.sleep(0.02)
    assert shown["files"][0]["status"] == "completed" and shown["name"] == "manuals"
    listed = cli_support.run("storage", "vector-stores", "list", *ep)
    assert store_id in listed.output and "files 1/1" in listed.output
    found = cli_support.run("storage", "vector-stores", "search", store_id, "how often to descale", *ep)
    assert found.exit_code == 0 and "guide.md" in found.output and "citric acid" in found.output
    rotated = cli_support.run("storage", "rotate", store_id, *ep)
    assert json.loads(rotated.output)["files_queued"] == 1
    assert cli_support.run("storage", "vector-stores", "delete", store_id, *ep).exit_code == 0
    assert cli_support.run("storage", "vector-stores", "show", store_id, *ep).exit_code == EXIT_NOT_FOUND


@pytest.mark.slow
def test_storage_unavailable_exits_5(tmp_path: Path) -> None:
    with cli_support.Server(cli_support.Harness()) as running:
        result = cli_support.run("storage", "vector-stores", "list", "--endpoint", running.url)
    assert result.exit_code == EXIT_ACTIVATION_FAILED and "SERVICE_UNAVAILABLE" in result.output
