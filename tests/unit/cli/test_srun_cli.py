"""`svc-srun` informational commands and `run` argument checks (no server started)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from app.cli.srun import cli


def test_models_lists_every_builtin_with_pins():
    result = CliRunner().invoke(cli, ["models"])
    assert result.exit_code == 0, result.output
    cards = {c["name"]: c for c in json.loads(result.output)["models"]}
    assert {"decision-model", "minilm-reranker", "minilm-embedding", "domain-classifier"} <= set(cards)
    assert cards["decision-model"]["digest"].startswith("sha256:")
    assert any(a["name"] == "svc-sr-decision-calibration" for a in cards["decision-model"]["artifacts"])


def test_plugins_and_devices_are_json():
    plugins = json.loads(CliRunner().invoke(cli, ["plugins"]).output)
    assert "decisions" in plugins["families"] and "exact" in plugins["profiles"]
    devices = json.loads(CliRunner().invoke(cli, ["devices"]).output)
    assert devices["devices"][0]["name"] == "cpu"


def test_run_rejects_bad_arguments(tmp_path):
    runner = CliRunner()
    assert runner.invoke(cli, ["run"]).exit_code == 2  # no model
    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  - revision: abc\n")  # model is required
    result = runner.invoke(cli, ["run", "--models", str(bad)])
    assert result.exit_code == 2 and "--models" in result.output
    two = runner.invoke(cli, ["run", "a", "b", "--served-model-name", "x"])
    assert two.exit_code == 2 and "single model" in two.output
    assert runner.invoke(cli, ["run", "a", "--max-queue", "0"]).exit_code == 2
