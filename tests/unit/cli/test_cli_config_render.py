"""`svc-sr config router` and `svc-sr config envoy`: rendered from a file, nothing started."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from app.cli.main import cli
from app.config.loader import load_config
from app.envoy.process import validate_config

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "config.yaml"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["config", *args])
    return result.exit_code, result.output


def test_router_prints_the_effective_document_with_every_default_spelled_out() -> None:
    code, out = run("router", "--config", str(CONFIG))
    assert code == 0, out
    rendered = yaml.safe_load(out)
    loaded = load_config(CONFIG).config
    assert rendered == loaded.to_document()
    # A default the file does not write is there, with the value the router runs with.
    assert rendered["global"]["services"]["envoy"]["admin_port"] == loaded.global_.services.envoy.admin_port
    compact_code, compact = run("import", str(CONFIG))
    assert compact_code == 0 and len(yaml.safe_load(compact)["global"]) <= len(rendered["global"])


def test_router_json_and_output_file(tmp_path: Path) -> None:
    target = tmp_path / "router.json"
    code, _ = run("router", "--config", str(CONFIG), "--format", "json", "-o", str(target))
    assert code == 0
    assert json.loads(target.read_text()) == load_config(CONFIG).config.to_document()


def test_envoy_prints_a_bootstrap_envoy_accepts(tmp_path: Path) -> None:
    code, out = run("envoy", "--config", str(CONFIG), "--listener-port", "18801")
    assert code == 0, out
    bootstrap = yaml.safe_load(out)
    listener = bootstrap["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"]["port_value"] == 18801
    path = tmp_path / "envoy.yaml"
    path.write_text(out)
    assert validate_config(path) is None  # the real Envoy binary's --mode validate


def test_an_invalid_file_exits_2_with_its_reasons(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v0.3\nrouting: {decisions: [{name: x, modelRefs: 7}]}\n")
    for command in ("router", "envoy"):
        code, out = run(command, "--config", str(bad))
        assert code == 2, out
        assert "invalid configuration" in out and "modelRefs" in out
