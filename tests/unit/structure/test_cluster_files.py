"""The cluster/ files are loadable by the tools that consume them (Serve, the Ray cluster launcher,
KubeRay) and agree with the code they point at. They are only ever read by those tools at deploy
time, so a typo would otherwise surface on a live cluster."""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import DeploymentSchema, RayActorOptionsSchema, ServeDeploySchema

from app.common.ray_settings import CLUSTER_ENV
from app.config.loader import load_config
from deployments.graph import GraphArgs

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "cluster"
SERVE_CONFIGS = ["serve-config.yaml", "serve-config-gpu.yaml"]
EXPECTED_DEPLOYMENTS = {
    "Observability",
    "Ingress",
    "Router",
    "Embedding",
    "ResponseCache",
    "DomainClassifier",
    "Guard",
    "DecisionModel",
    "Storage",
}
MODEL_DEPLOYMENTS = {"Embedding"}
LAPTOP_CPUS = 2.0


def _load(name: str) -> Any:
    return yaml.safe_load((CLUSTER / name).read_text())


def _rayservice() -> dict[str, Any]:
    return _load("kuberay-rayservice.yaml")


def _embedded_serve_config() -> dict[str, Any]:
    return yaml.safe_load(_rayservice()["spec"]["serveConfigV2"])


def _all_serve_configs() -> list[Any]:
    cases = [pytest.param(name, _load(name), id=name) for name in SERVE_CONFIGS]
    return [*cases, pytest.param("kuberay", _embedded_serve_config(), id="kuberay-serveConfigV2")]


def _deployments(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (app,) = cfg["applications"]
    return {d["name"]: d for d in app["deployments"]}


@pytest.mark.parametrize("name", sorted(p.name for p in CLUSTER.glob("*.yaml")))
def test_every_cluster_yaml_parses_to_a_mapping(name: str) -> None:
    assert isinstance(_load(name), dict)


@pytest.mark.parametrize(("label", "cfg"), _all_serve_configs())
def test_serve_config_validates_against_serve_deploy_schema(label: str, cfg: dict[str, Any]) -> None:
    schema = ServeDeploySchema.model_validate(cfg)
    assert [a.name for a in schema.applications] == ["svc-sr"], label


@pytest.mark.parametrize(("label", "cfg"), _all_serve_configs())
def test_serve_config_has_no_unknown_keys(label: str, cfg: dict[str, Any]) -> None:
    # ServeDeploySchema ignores unknown keys, so a misspelt option would be silently dropped.
    for dep in _deployments(cfg).values():
        assert set(dep) <= set(DeploymentSchema.model_fields), (label, dep["name"])
        assert set(dep.get("ray_actor_options", {})) <= set(RayActorOptionsSchema.model_fields), dep["name"]
        if "autoscaling_config" in dep:
            assert set(dep["autoscaling_config"]) <= set(AutoscalingConfig.model_fields), dep["name"]
            scaling = AutoscalingConfig(**dep["autoscaling_config"])
            assert (
                scaling.min_replicas
                <= (scaling.initial_replicas or scaling.min_replicas)
                <= scaling.max_replicas
            )


@pytest.mark.parametrize(("label", "cfg"), _all_serve_configs())
def test_application_points_at_the_graph_builder(label: str, cfg: dict[str, Any]) -> None:
    (app,) = cfg["applications"]
    assert app["import_path"] == "deployments.graph:build_app", label
    # The laptop file serves the default config; the GPU ones the in-cluster vLLM example.
    config_path = ROOT / app["args"]["config_path"]
    assert ROOT / "configs" in config_path.parents, label
    load_config(config_path)  # the file the cluster will read exists and validates
    assert set(app["args"]) <= set(GraphArgs.model_fields), label  # no unknown builder args
    GraphArgs.model_validate(app["args"])
    assert set(_deployments(cfg)) == EXPECTED_DEPLOYMENTS, label
    for name in ("Ingress", "Router"):
        assert _deployments(cfg)[name]["max_ongoing_requests"] >= 1024, (label, name)
    # Native decision requests wait on encoder batches: the default limit (5) would queue them.
    assert _deployments(cfg)["DecisionModel"]["max_ongoing_requests"] >= 256, label


def test_import_path_module_and_builder_exist() -> None:
    module, attr = _load("serve-config.yaml")["applications"][0]["import_path"].split(":")
    source = ROOT / (module.replace(".", "/") + ".py")
    assert source.is_file(), f"{source} missing"
    # Parse instead of import: importing the graph needs a Ray runtime and the models.
    tree = ast.parse(source.read_text())
    top_level = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    top_level |= {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    assert attr in top_level, f"{attr} is not defined at module level of {source}"


def test_config_path_arg_exists() -> None:
    config_path = _load("serve-config.yaml")["applications"][0]["args"]["config_path"]
    assert (ROOT / config_path).is_file()


def test_laptop_config_stays_local_and_fits_two_cores() -> None:
    cfg = _load("serve-config.yaml")
    assert cfg["http_options"]["host"] == "127.0.0.1"
    assert cfg["http_options"]["port"] == 8080
    worst_case = 0.0
    for dep in _deployments(cfg).values():
        replicas = dep.get("autoscaling_config", {}).get("max_replicas", dep.get("num_replicas", 1))
        opts = dep.get("ray_actor_options", {})
        assert opts.get("num_gpus", 0) == 0, dep["name"]
        worst_case += replicas * opts.get("num_cpus", 1.0)  # Ray's default is one CPU per replica
    assert worst_case <= LAPTOP_CPUS, f"all replicas at max need {worst_case} CPUs"


def test_gpu_config_shares_gpus_and_scales_out() -> None:
    cfg = _load("serve-config-gpu.yaml")
    assert cfg["http_options"]["port"] == 8080
    deps = _deployments(cfg)
    for name in MODEL_DEPLOYMENTS:
        gpus = deps[name]["ray_actor_options"]["num_gpus"]
        assert 0 < gpus < 1, f"{name} should take a fraction of a GPU"
        assert deps[name]["autoscaling_config"]["max_replicas"] >= 8
    for name in set(deps) - MODEL_DEPLOYMENTS:
        assert deps[name].get("ray_actor_options", {}).get("num_gpus", 0) == 0, name


def test_rayservice_embeds_the_gpu_application() -> None:
    svc = _rayservice()
    assert (svc["apiVersion"], svc["kind"]) == ("ray.io/v1", "RayService")
    embedded = _embedded_serve_config()
    assert embedded["applications"] == _load("serve-config-gpu.yaml")["applications"]
    cluster = svc["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == ray.__version__
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    serve_ports = [p["containerPort"] for p in head["ports"] if p["name"] == "serve"]
    assert serve_ports == [embedded["http_options"]["port"]]
    gpu_groups = [
        g
        for g in cluster["workerGroupSpecs"]
        if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]
    ]
    assert gpu_groups and all(g["minReplicas"] <= g["replicas"] <= g["maxReplicas"] for g in gpu_groups)
    # The relative config_path resolves against the directory Ray starts in, on every pod.
    containers = [head] + [g["template"]["spec"]["containers"][0] for g in cluster["workerGroupSpecs"]]
    assert {c.get("workingDir") for c in containers} == {"/home/ray/svc-sr"}


def test_ray_cluster_file_matches_the_launcher_schema() -> None:
    cfg = _load("ray-cluster.yaml")
    schema_path = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
    jsonschema.validate(cfg, json.loads(schema_path.read_text()))
    # Same checks `ray up` runs after filling in the provider defaults.
    validate_config(prepare_config(cfg))
    assert cfg["head_node_type"] in cfg["available_node_types"]
    assert any(t["resources"].get("GPU", 0) >= 1 for t in cfg["available_node_types"].values())
    assert "~/svc-sr" in cfg["file_mounts"]
    # Relative config_path resolves against the `ray start` directory; every node shares one token.
    for cmd in cfg["head_start_ray_commands"][-1:] + cfg["worker_start_ray_commands"][-1:]:
        assert "cd ~/svc-sr;" in cmd and "RAY_AUTH_MODE=token" in cmd, cmd
    assert "~/.ray/auth_token" in cfg["file_mounts"]


def test_ray_cluster_file_pins_torch_everywhere() -> None:
    cfg = _load("ray-cluster.yaml")
    commands = list(cfg.get("setup_commands", [])) + list(cfg.get("head_setup_commands", []))
    for node_type in cfg["available_node_types"].values():
        commands += node_type.get("worker_setup_commands", [])
    torch_installs = [c for c in commands if re.search(r"\btorch\b", c)]
    assert torch_installs, "no torch install found"
    for cmd in torch_installs:
        if "scripts/vllm-venv.sh" in cmd:  # the vLLM environment: vLLM's own torch pin, pinned too
            assert re.search(r"VLLM_PACKAGE=vllm==\S+", cmd) and re.search(r"TORCH_SPEC=torch==\S+", cmd), cmd
            continue
        assert re.search(r"[\"']?torch==2\.13\.0[\"']?(\s|$)", cmd), cmd
    head_torch = [c for c in cfg["head_setup_commands"] if "torch" in c]
    assert all("download.pytorch.org/whl/cpu" in c for c in head_torch)


def test_every_ray_start_gets_the_serve_fast_path() -> None:
    """The controller and replicas read the fast-path variables at start (deployments/serve_env.py)."""
    wanted = {f"{key}={value}" for key, value in CLUSTER_ENV.items()}
    cfg = _load("ray-cluster.yaml")
    for commands in (cfg["head_start_ray_commands"], cfg["worker_start_ray_commands"]):
        start = next(c for c in commands if "ray start" in c)
        assert wanted <= set(shlex.split(start.replace(";", " ")))
    cluster = _rayservice()["spec"]["rayClusterConfig"]
    containers = [cluster["headGroupSpec"]["template"]["spec"]["containers"][0]] + [
        g["template"]["spec"]["containers"][0] for g in cluster["workerGroupSpecs"]
    ]
    for container in containers:
        env = {f"{e['name']}={e['value']}" for e in container.get("env", [])}
        assert wanted <= env


@pytest.mark.parametrize(("label", "cfg"), _all_serve_configs())
def test_serve_configs_scale_the_ingress_over_shared_state(label: str, cfg: dict[str, Any]) -> None:
    """Two Ingress replicas at least, the management state and the cache on a shared store, the
    ResponseCache scaled out over it; the args are what GraphArgs accepts."""
    app = cfg["applications"][0]
    args = GraphArgs.model_validate(app["args"])
    deployments = _deployments(cfg)
    ingress = deployments["Ingress"]
    assert ingress.get("autoscaling_config", {}).get("min_replicas", ingress.get("num_replicas", 1)) >= 2
    assert args.management_store is not None and args.management_store.backend == "redis"
    assert args.app_name == app["name"]
    cache = args.config_overrides["global"]["stores"]["response_cache"]
    assert cache["backend_type"] in ("redis", "milvus")
    response_cache = deployments["ResponseCache"]
    assert (
        response_cache.get("autoscaling_config", {}).get(
            "min_replicas", response_cache.get("num_replicas", 1)
        )
        >= 2
    )
