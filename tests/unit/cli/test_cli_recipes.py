"""`svc-sr recipe list|get|apply|delete|validate` against a real management API (uvicorn over
the in-process app of tests/unit/management/test_management_support.py): output, writes and exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from app.cli.remote import EXIT_CONFLICT, EXIT_INVALID, EXIT_NOT_FOUND
from tests.fakes.upstream import FakeUpstream
from tests.unit.cli import test_cli_config as cli_support
from tests.unit.management.test_management_recipes import coder_routing, document


@pytest.fixture
def server() -> Iterator[cli_support.Server]:
    with (
        FakeUpstream(name="recipes") as upstream,
        cli_support.Server(cli_support.Harness(document(upstream.base_url))) as running,
    ):
        yield running


def run(*args: str):
    return cli_support.run(*args)


def test_help_lists_the_recipe_commands():
    result = run("recipe", "--help")
    assert result.exit_code == 0
    for command in ("list", "get", "apply", "delete", "validate"):
        assert f"  {command} " in result.stdout


@pytest.mark.slow
def test_list_and_get(server: cli_support.Server, tmp_path: Path):
    ep = ("--endpoint", server.url)
    table = run("recipe", "list", *ep)
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].startswith("default (default)") and lines[2].startswith("coder")
    assert "coder-auto" in lines[2] and "code questions" in lines[2]
    raw = json.loads(run("recipe", "list", *ep, "--json").stdout)
    assert [r["name"] for r in raw["recipes"]] == ["default", "coder", "spare"]
    got = run("recipe", "get", "coder", *ep)
    assert got.exit_code == 0
    assert yaml.safe_load(got.stdout) == {
        "name": "coder",
        "description": "code questions",
        "routing": coder_routing(),
    }
    out = tmp_path / "spare.json"
    assert run("recipe", "get", "spare", *ep, "--format", "json", "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text())["routing"] == coder_routing("big", "rust")
    assert run("recipe", "get", "nope", *ep).exit_code == EXIT_NOT_FOUND


@pytest.mark.slow
def test_apply_get_round_trip_and_routing(server: cli_support.Server, tmp_path: Path):
    ep = ("--endpoint", server.url)
    exported = tmp_path / "coder.yaml"
    assert run("recipe", "get", "coder", *ep, "-o", str(exported)).exit_code == 0
    recipe = yaml.safe_load(exported.read_text())
    recipe["routing"] = coder_routing("big", "haskell")
    exported.write_text(yaml.safe_dump(recipe))
    applied = run("recipe", "apply", "-f", str(exported), *ep)
    assert applied.exit_code == 0, applied.stderr
    assert json.loads(applied.stdout)["config_version"] == 2
    coder = server.harness.pipeline.config.recipes[0]  # hot-reloaded
    assert coder.name == "coder" and coder.routing.signals.keywords[0].keywords == ["haskell"]
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump({"routing": coder_routing()}))
    assert run("recipe", "apply", "-f", str(new), *ep).exit_code == EXIT_INVALID  # no name
    created = run("recipe", "apply", "-f", str(new), "--name", "writer", *ep)
    assert created.exit_code == 0, created.stderr
    assert [r.name for r in server.harness.pipeline.config.recipes] == ["coder", "spare", "writer"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "writer", "routing": coder_routing("ghost")}))
    refused = run("recipe", "apply", "-f", str(bad), *ep)
    assert (
        refused.exit_code == EXIT_INVALID and "recipes[2].routing.decisions[0].modelRefs[0]" in refused.stderr
    )
    stale = run("recipe", "apply", "-f", str(exported), "--if-match", '"0000"', *ep)
    assert stale.exit_code == EXIT_CONFLICT


@pytest.mark.slow
def test_validate_and_delete(server: cli_support.Server, tmp_path: Path):
    ep = ("--endpoint", server.url)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"name": "writer", "routing": coder_routing("big")}))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "writer", "routing": coder_routing("ghost")}))
    ok = run("recipe", "validate", "-f", str(good), *ep)
    assert ok.exit_code == 0 and json.loads(ok.stdout)["valid"] is True
    invalid = run("recipe", "validate", "-f", str(bad), *ep)
    assert invalid.exit_code == EXIT_INVALID and "recipes[2].routing.decisions[0]" in invalid.stderr
    in_use = run("recipe", "validate", "--delete", "coder", *ep)
    assert in_use.exit_code == EXIT_INVALID and "recipe_in_use" in in_use.stderr
    assert run("recipe", "validate", *ep).exit_code == EXIT_INVALID  # neither -f nor --delete
    refused = run("recipe", "delete", "coder", *ep)
    assert refused.exit_code == EXIT_CONFLICT and "RECIPE_IN_USE" in refused.stderr
    assert run("recipe", "delete", "nope", *ep).exit_code == EXIT_NOT_FOUND
    deleted = run("recipe", "delete", "spare", *ep)
    assert deleted.exit_code == 0, deleted.stderr
    assert [r.name for r in server.harness.pipeline.config.recipes] == ["coder"]
