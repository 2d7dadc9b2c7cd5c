"""`svc-sr serve MODEL --engine` (native serving): the options' mapping to the router
configuration, Serve replicas and visible GPUs, and the refusals, without starting Ray. The
served engine itself is proven by tests/integration/test_in_cluster_vllm.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from app.cli import engine_serving
from app.cli.engine_serving import NATIVE_PORT, EngineServing
from app.cli.main import cli
from app.config.loader import parse_config


def test_engine_mode_serves_the_model_in_the_graph_behind_the_router_on_8899() -> None:
    serving = EngineServing(model="/models/Qwen2.5-0.5B-Instruct/", platform="cuda", data_parallel_size=2)
    config = parse_config(serving.config_document()).config
    (model,) = config.providers.models
    assert model.name == "Qwen2.5-0.5B-Instruct" and config.providers.defaults.default_model == model.name
    assert model.llm_config is not None and not model.backend_refs
    assert model.llm_config.model_loading_config.model_source == "/models/Qwen2.5-0.5B-Instruct/"
    options = model.llm_config.deployment_options()
    assert options["num_replicas"] == 2 and options["ray_actor_options"]["num_gpus"] == 1
    assert [listener.port for listener in config.listeners] == [NATIVE_PORT]
    assert config.global_.services.envoy.enabled is False


def test_cpu_platform_gives_replicas_cpus_only_and_the_cpu_kernels_dtype() -> None:
    serving = EngineServing(model="/m/tiny", platform="cpu", max_model_len=256)
    llm = parse_config(serving.config_document()).config.providers.models[0].llm_config
    assert llm is not None
    assert "num_gpus" not in llm.deployment_options()["ray_actor_options"]
    assert llm.engine_kwargs == {"dtype": "bfloat16", "max_model_len": 256}
    assert serving.environment() == {}


def test_enforce_eager_reaches_the_engine_only_when_asked() -> None:
    eager = EngineServing(model="/m/tiny", platform="cpu", enforce_eager=True)
    llm = parse_config(eager.config_document()).config.providers.models[0].llm_config
    assert llm is not None and llm.engine_kwargs["enforce_eager"] is True
    default = EngineServing(model="/m/tiny", platform="cuda")
    llm = parse_config(default.config_document()).config.providers.models[0].llm_config
    assert llm is not None and "enforce_eager" not in llm.engine_kwargs


@pytest.mark.parametrize(
    "platform, variable", [("cuda", "CUDA_VISIBLE_DEVICES"), ("rocm", "ROCR_VISIBLE_DEVICES")]
)
def test_device_ids_become_the_gpus_ray_may_place_replicas_on(platform: str, variable: str) -> None:
    serving = EngineServing(model="/m", platform=platform, device_ids="2, 3", data_parallel_size=2)
    assert serving.device_ids == [2, 3]
    assert serving.environment() == {variable: "2,3"}


def test_auto_platform_follows_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_serving, "detected_platform", lambda: "cuda")
    assert EngineServing(model="/m").resolved_platform() == "cuda"
    monkeypatch.setattr(engine_serving, "detected_platform", lambda: "cpu")
    assert EngineServing(model="/m").resolved_platform() == "cpu"


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"data_parallel_size": 0}, "greater than or equal to 1"),
        ({"data_parallel_size": 3, "device_ids": "0,1"}, "needs as many GPUs"),
        ({"device_ids": "0,x"}, "comma-separated GPU indexes"),
        ({"device_ids": "1,1"}, "repeated"),
        ({"device_ids": "0", "platform": "cpu"}, "cannot go with --platform cpu"),
        ({"platform": "tpu"}, "platform"),
    ],
)
def test_bad_option_combinations_are_refused(fields: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        EngineServing(model="/m", **fields)  # type: ignore[arg-type]


def test_the_cli_refuses_model_without_engine_and_bad_options_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SVC_SR_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    alone = runner.invoke(cli, ["serve", "/models/x"])
    assert alone.exit_code == 2 and "MODEL and --engine go together" in alone.output
    bad = runner.invoke(cli, ["serve", "/models/x", "--engine", "--platform", "cpu", "--device-ids", "0"])
    assert bad.exit_code == 2 and "--platform cpu" in bad.output
