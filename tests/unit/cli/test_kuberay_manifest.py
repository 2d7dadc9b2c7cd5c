"""`svc-sr manifest`: a SemanticRouter resource (v1alpha1, docs/deploy.md) becomes a KubeRay RayService
that KubeRay accepts, whose Serve config Serve accepts and whose router config svc-sr accepts;
bad resources are refused naming the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from ray.serve.config import AutoscalingConfig
from ray.serve.schema import DeploymentSchema, RayActorOptionsSchema, ServeDeploySchema

from app.cli.kuberay import kuberay_command, manifests, rayservice_manifest, serve_config, unmapped_fields
from app.cli.kuberay_resource import CheckedResource, ResourceError, check_resource
from app.config.loader import parse_config
from deployments.graph import GraphArgs

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "cluster" / "semanticrouter-example.yaml"

# The required lists and types of KubeRay's v1 CRDs (ray-project/kuberay, ray-operator/apis/ray/v1
# raycluster_types.go and rayservice_types.go: fields without `omitempty`), with the core/v1 pod
# template parts they embed (PodSpec.containers, Container.name). Older operators also require
# rayStartParams on both group kinds, so the manifest must carry it.
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_POD_TEMPLATE = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "spec": {
            "type": "object",
            "required": ["containers"],
            "properties": {
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "image"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "image": {"type": "string", "minLength": 1},
                            "imagePullPolicy": {"enum": ["Always", "Never", "IfNotPresent"]},
                            "ports": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["containerPort"],
                                    "properties": {
                                        "containerPort": {"type": "integer", "minimum": 1, "maximum": 65535},
                                        "name": {"type": "string", "maxLength": 15},
                                    },
                                },
                            },
                        },
                    },
                }
            },
        }
    },
}
RAYSERVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayService"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["serveConfigV2", "rayClusterConfig"],
            "properties": {
                "serveConfigV2": {"type": "string"},
                "rayClusterConfig": {
                    "type": "object",
                    "required": ["headGroupSpec"],
                    "properties": {
                        "enableInTreeAutoscaling": {"type": "boolean"},
                        "headGroupSpec": {
                            "type": "object",
                            "required": ["rayStartParams", "template"],
                            "properties": {"rayStartParams": _STRING_MAP, "template": _POD_TEMPLATE},
                        },
                        "workerGroupSpecs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": [
                                    "groupName",
                                    "rayStartParams",
                                    "template",
                                    "minReplicas",
                                    "maxReplicas",
                                ],
                                "properties": {
                                    "groupName": {"type": "string", "minLength": 1},
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "minReplicas": {"type": "integer", "minimum": 0},
                                    "maxReplicas": {"type": "integer", "minimum": 0},
                                    "rayStartParams": _STRING_MAP,
                                    "template": _POD_TEMPLATE,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def _example() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return document


def _checked(document: dict[str, Any] | None = None) -> CheckedResource:
    return check_resource(_example() if document is None else document)


def _cpu_only(**spec: Any) -> dict[str, Any]:
    """The example without GPUs, shared state, autoscaling, ingress or gateway, plus `spec`."""
    document = _example()
    for key in ("resources", "managementStore", "autoscaling", "ingress", "gateway"):
        document["spec"].pop(key)
    document["spec"].update(spec)
    return document


def _application(manifest: dict[str, Any]) -> dict[str, Any]:
    app: dict[str, Any] = yaml.safe_load(manifest["spec"]["serveConfigV2"])["applications"][0]
    return app


def _deployments(app: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in app["deployments"]}


def _refusal(document: dict[str, Any]) -> str:
    with pytest.raises(ResourceError) as caught:
        check_resource(document)
    return str(caught.value)


def test_example_becomes_a_rayservice_with_every_required_field() -> None:
    manifest = rayservice_manifest(_checked())
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayService")
    assert manifest["metadata"]["name"] == "svc-sr"
    assert manifest["metadata"]["namespace"] == "llm"
    jsonschema.validate(manifest, RAYSERVICE_SCHEMA)
    cluster = manifest["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == "ghcr.io/your-org/svc-sr:0.1.0-gpu"
    assert head["imagePullPolicy"] == "IfNotPresent"
    assert {6379, 8265, 10001, 8000, 9190} <= {p["containerPort"] for p in head["ports"]}
    (group,) = cluster["workerGroupSpecs"]
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (1, 1, 8)
    assert cluster["enableInTreeAutoscaling"] is True


def test_serve_config_is_a_valid_serve_application_with_the_inline_router_config() -> None:
    checked = _checked()
    config = yaml.safe_load(rayservice_manifest(checked)["spec"]["serveConfigV2"])
    schema = ServeDeploySchema.model_validate(config)
    assert [a.name for a in schema.applications] == ["svc-sr"]
    app = config["applications"][0]
    assert app["import_path"] == "deployments.graph:build_app"
    assert set(app["args"]) <= set(GraphArgs.model_fields)  # no argument the builder would drop
    args = GraphArgs.model_validate(app["args"])
    assert args.app_name == app["name"] == "svc-sr"
    assert args.metrics["port"] == 9190
    assert args.config == _example()["spec"]["config"]
    assert args.config is not None
    parse_config(args.config)
    assert args.management_store is not None and args.management_store.backend == "redis"
    for dep in app["deployments"]:  # ServeDeploySchema ignores unknown keys: check them here
        assert set(dep) <= set(DeploymentSchema.model_fields), dep["name"]
        assert set(dep["ray_actor_options"]) <= set(RayActorOptionsSchema.model_fields), dep["name"]
        if "autoscaling_config" in dep:
            AutoscalingConfig(**dep["autoscaling_config"])
    assert serve_config(checked) == config


def test_gpu_resource_at_default_targets_matches_the_shipped_rayservice() -> None:
    """The deployments and Serve options are those of cluster/kuberay-rayservice.yaml (itself kept
    equal to cluster/serve-config-gpu.yaml by test_cluster_files)."""
    shipped_service = yaml.safe_load((ROOT / "cluster" / "kuberay-rayservice.yaml").read_text())
    shipped = yaml.safe_load(shipped_service["spec"]["serveConfigV2"])
    generated = yaml.safe_load(rayservice_manifest(_checked())["spec"]["serveConfigV2"])
    for key in ("proxy_location", "http_options", "logging_config"):
        assert generated[key] == shipped[key], key
    for key in ("deployments", "runtime_env", "route_prefix", "import_path"):
        assert generated["applications"][0][key] == shipped["applications"][0][key], key
    assert generated["applications"][0]["args"]["router_local_encoder"] is False
    cluster = rayservice_manifest(_checked())["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == shipped_service["spec"]["rayClusterConfig"]["rayVersion"]


def test_cpu_only_resource_without_shared_state_or_autoscaling() -> None:
    manifest = rayservice_manifest(_checked(_cpu_only(replicas=3)))
    jsonschema.validate(manifest, RAYSERVICE_SCHEMA)
    cluster = manifest["spec"]["rayClusterConfig"]
    (group,) = cluster["workerGroupSpecs"]
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (3, 3, 3)
    assert cluster["enableInTreeAutoscaling"] is False and "autoscalerOptions" not in cluster
    assert "tolerations" not in group["template"]["spec"]
    app = _application(manifest)
    deployments = _deployments(app)
    assert all("num_gpus" not in d["ray_actor_options"] for d in deployments.values())
    assert "router_local_encoder" not in app["args"]  # the Router encodes in-process on CPU
    # One Ingress replica: without a shared store each replica would keep its own state file.
    assert (
        deployments["Ingress"].get("num_replicas") == 1 and "autoscaling_config" not in deployments["Ingress"]
    )
    ServeDeploySchema.model_validate(yaml.safe_load(manifest["spec"]["serveConfigV2"]))
    assert [m["kind"] for m in manifests(_checked(_cpu_only()))] == ["RayService"]


def test_cpu_target_scales_serve_targets_and_memory_target_is_reported() -> None:
    document = _example()
    document["spec"]["autoscaling"].update(
        targetCPUUtilizationPercentage=40, targetMemoryUtilizationPercentage=70
    )
    checked = _checked(document)
    halved = _deployments(_application(rayservice_manifest(checked)))
    baseline = _deployments(_application(rayservice_manifest(_checked())))
    for name, dep in baseline.items():
        if "autoscaling_config" in dep:
            expected = dep["autoscaling_config"]["target_ongoing_requests"] // 2
            assert halved[name]["autoscaling_config"]["target_ongoing_requests"] == expected, name
    (note,) = unmapped_fields(checked)
    assert "targetMemoryUtilizationPercentage" in note


def test_ingress_and_gateway_route_to_kuberays_serve_service() -> None:
    _service, ingress, route = manifests(_checked())
    assert (ingress["apiVersion"], ingress["kind"]) == ("networking.k8s.io/v1", "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "router.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"] == {
        "name": "svc-sr-serve-svc",
        "port": {"number": 8000},
    }
    assert (route["apiVersion"], route["kind"]) == ("gateway.networking.k8s.io/v1", "HTTPRoute")
    assert route["spec"]["parentRefs"] == [{"name": "inference-gateway", "namespace": "gateway-system"}]
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": "svc-sr-serve-svc", "port": 8000}]


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    document = _example()
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return document


@pytest.mark.parametrize(
    ("document", "field", "reason"),
    [
        pytest.param(
            _with(("spec", "image", "pullPolicy"), "Alwyas"),
            "spec.image.pullPolicy",
            "Always",
            id="pullPolicy",
        ),
        pytest.param(
            _with(("spec", "metrics", "port"), 70000), "spec.metrics.port", "65535", id="port-range"
        ),
        pytest.param(
            _with(("spec", "metrics", "port"), 8000), "spec.metrics", "taken by Ray", id="port-taken"
        ),
        pytest.param(
            _with(("spec", "autoscaling"), {"enabled": True, "minReplicas": 5, "maxReplicas": 2}),
            "spec.autoscaling",
            "minReplicas (5) exceeds maxReplicas (2)",
            id="min-over-max",
        ),
        pytest.param(_with(("spec", "replicas"), 20), "spec", "replicas (20)", id="replicas-outside-bounds"),
        pytest.param(
            _with(("spec", "autoscaling", "minReplica"), 1), "spec.autoscaling.minReplica", "Extra", id="typo"
        ),
        pytest.param(_with(("apiVersion",), "vllm.ai/v1"), "apiVersion", "vllm.ai/v1alpha1", id="apiVersion"),
        pytest.param(_with(("metadata", "name"), "Router_1"), "metadata.name", "pattern", id="name"),
        pytest.param(
            _with(("spec", "resources"), {"limits": {"nvidia.com/gpu": "0.5"}}),
            "spec.resources",
            "whole number of GPUs",
            id="fractional-gpu",
        ),
    ],
)
def test_bad_deployment_fields_are_refused_by_name(document: dict[str, Any], field: str, reason: str) -> None:
    message = _refusal(document)
    assert f"  - {field}: " in message, message
    assert reason in message, message


def test_broken_router_config_is_refused_with_its_path() -> None:
    document = _example()
    broken = copy.deepcopy(document["spec"]["config"])
    broken["routing"]["decisions"][0]["modelRefs"] = [{"model": "no-such-model"}]
    message = _refusal(_with(("spec", "config"), broken))
    assert "spec.config.routing.decisions[0].modelRefs[0]" in message, message
    assert "no-such-model" in message


def test_cli_writes_the_manifest(tmp_path: Path) -> None:
    out = tmp_path / "rayservice.yaml"
    result = CliRunner().invoke(kuberay_command, [str(EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(out.read_text()))
    assert [d["kind"] for d in documents] == ["RayService", "Ingress", "HTTPRoute"]
    assert documents[0] == rayservice_manifest(_checked())
    printed = CliRunner().invoke(kuberay_command, [str(EXAMPLE)])
    assert printed.exit_code == 0 and list(yaml.safe_load_all(printed.stdout)) == documents


def test_cli_refuses_a_bad_resource_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(("spec", "image", "pullPolicy"), "sometimes")))
    out = tmp_path / "never.yaml"
    result = CliRunner().invoke(kuberay_command, [str(bad), "-o", str(out)])
    assert result.exit_code == 2
    assert "spec.image.pullPolicy" in result.stderr
    assert not out.exists()
