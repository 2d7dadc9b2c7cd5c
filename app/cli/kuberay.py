"""`svc-sr manifest FILE`: a declarative router resource -> a KubeRay RayService.

The resource is the contract's v1alpha1 schema (docs/deploy.md) as the reference router's operator names it
(`apiVersion: vllm.ai/v1alpha1`, `kind: SemanticRouter`; models in `app/cli/kuberay_resource.py`).
Instead of an operator, svc-sr converts it once into objects KubeRay and Kubernetes run:

- a `ray.io/v1` RayService whose `serveConfigV2` is the application of
  `cluster/serve-config-gpu.yaml` (same deployments and options) with the router configuration
  inline (`args.config`, so no file has to be baked into the image), `app_name` = the resource
  name and `args.metrics.port` = `spec.metrics.port`; `rayClusterConfig` is a head group and one
  worker group built from `spec.image` (repository, tag, pullPolicy) and `spec.resources`;
- a `networking.k8s.io/v1` Ingress when `spec.ingress.enabled`, and a `gateway.networking.k8s.io/v1`
  HTTPRoute attached to `spec.gateway.existingRef`; both send traffic to the Service KubeRay
  creates for Serve (`<name>-serve-svc`, port 8000), which is also what to port-forward without them.

Mapping of the fields that have no KubeRay equivalent:

- `replicas` / `autoscaling`: Ray pods, not router processes. Autoscaling off: one worker group
  of `replicas` pods (default 1). On: the worker group spans minReplicas..maxReplicas and KubeRay's
  in-tree Ray autoscaler adds a pod when Serve replicas cannot be placed.
- `targetCPUUtilizationPercentage` (default 80) scales each Serve deployment's
  `target_ongoing_requests` proportionally: 80 gives the shipped values, 40 half of them (Serve
  adds replicas, and so pods, sooner). Serve measures load as ongoing requests, not CPU.
- `targetMemoryUtilizationPercentage`: Serve has no memory-driven scaling; it is reported by
  `unmapped_fields` (the command prints it as a warning) and otherwise ignored.
- `resources` with `nvidia.com/gpu`: GPU pods (tolerating the `nvidia.com/gpu` taint); the
  Embedding deployment then takes 0.25 GPU per replica and the Router stops encoding in-process,
  as in the shipped GPU config.
- `managementStore` absent: one Ingress replica, since each replica would keep its own state
  file; set it (Redis) to scale the Ingress.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import click
import yaml

from app.cli.kuberay_resource import GPU_RESOURCE, RAY_PORTS, CheckedResource, ResourceError, check_resource
from app.common.ray_settings import CLUSTER_ENV
from app.config.errors import ConfigError
from app.config.llm_serving import VLLM_PYTHON_ENV
from app.config.loader import parse_text

SERVE_PORT = 8000  # KubeRay's serve Service targets the head container port named `serve`
WORKING_DIR = "/home/ray/svc-sr"  # where the image holds the checkout: import_path resolves here
BASELINE_CPU_TARGET = 80  # the reference operator's default: maps to the shipped targets unchanged
GPU_PER_EMBEDDING = 0.25
GPU_VLLM_PYTHON = "/opt/vllm/bin/python"  # the GPU image's vLLM environment (docs/deploy.md)
_HTTP_OPTIONS = {"host": "0.0.0.0", "port": SERVE_PORT, "request_timeout_s": 600, "keep_alive_timeout_s": 75}
_LOGGING = {"encoding": "JSON", "log_level": "INFO", "enable_access_log": True}


def _scaled(
    min_r: int, init_r: int, max_r: int, target: int, up: int | None = None, down: int | None = None
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "min_replicas": min_r,
        "initial_replicas": init_r,
        "max_replicas": max_r,
        "target_ongoing_requests": target,
    }
    if up is not None:
        config["upscale_delay_s"] = up
    if down is not None:
        config["downscale_delay_s"] = down
    return config


# The deployments of cluster/serve-config-gpu.yaml (a unit test keeps the two equal).
_DEPLOYMENTS: tuple[dict[str, Any], ...] = (
    {
        "name": "Ingress",
        "graceful_shutdown_timeout_s": 300,  # in-flight LLM streams finish during a roll-out
        "max_ongoing_requests": 1024,
        "autoscaling_config": _scaled(2, 2, 16, 256, 10, 300),
        "ray_actor_options": {"num_cpus": 0.5},
    },
    {
        "name": "Router",
        "max_ongoing_requests": 1024,
        "autoscaling_config": _scaled(2, 2, 32, 256, 10, 300),
        "ray_actor_options": {"num_cpus": 1},
    },
    {
        "name": "Embedding",
        "max_ongoing_requests": 256,
        "autoscaling_config": _scaled(1, 2, 64, 64, 5, 300),
        "ray_actor_options": {"num_cpus": 1, "num_gpus": GPU_PER_EMBEDDING},
    },
    {
        "name": "ResponseCache",
        "num_replicas": 2,
        "max_ongoing_requests": 2048,
        "ray_actor_options": {"num_cpus": 1},
    },
    {
        "name": "DomainClassifier",
        "max_ongoing_requests": 1024,
        "autoscaling_config": _scaled(1, 1, 16, 128),
        "ray_actor_options": {"num_cpus": 1},
    },
    {
        "name": "Guard",
        "max_ongoing_requests": 1024,
        "autoscaling_config": _scaled(1, 2, 32, 64),
        "ray_actor_options": {"num_cpus": 1},
    },
    {
        "name": "DecisionModel",
        "max_ongoing_requests": 512,
        "autoscaling_config": _scaled(1, 1, 16, 64, 5, 300),
        "ray_actor_options": {"num_cpus": 1},
    },
    {
        "name": "Observability",
        "num_replicas": 1,
        "max_ongoing_requests": 1024,
        "ray_actor_options": {"num_cpus": 0.1},
    },  # One replica: it owns the records file, the ingestion worker and a Milvus Lite file.
    {
        "name": "Storage",
        "num_replicas": 1,
        "max_ongoing_requests": 64,
        "ray_actor_options": {"num_cpus": 0.1},
    },
)


def _deployments(checked: CheckedResource) -> list[dict[str, Any]]:
    spec = checked.resource.spec
    pct = spec.autoscaling.target_cpu_utilization_percentage
    gpu = spec.resources.gpus() > 0
    out = []
    for base in _DEPLOYMENTS:
        dep = {**base, "ray_actor_options": dict(base["ray_actor_options"])}
        if "autoscaling_config" in dep:
            scaling = dict(dep["autoscaling_config"])
            scaling["target_ongoing_requests"] = max(
                1, round(scaling["target_ongoing_requests"] * pct / BASELINE_CPU_TARGET)
            )
            dep["autoscaling_config"] = scaling
        if not gpu:
            dep["ray_actor_options"].pop("num_gpus", None)
        if dep["name"] == "Ingress" and spec.management_store is None:
            dep.pop("autoscaling_config")
            dep = {"name": "Ingress", "num_replicas": 1, **{k: v for k, v in dep.items() if k != "name"}}
        out.append(dep)
    return out


def serve_config(checked: CheckedResource) -> dict[str, Any]:
    """The Serve config (`serve deploy` format) of the resource's application."""
    resource = checked.resource
    spec = resource.spec
    name = resource.metadata.name
    args: dict[str, Any] = {"config": spec.config, "app_name": name}
    args["metrics"] = {"enabled": spec.metrics.enabled, "port": spec.metrics.port}
    env_vars = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    if spec.resources.gpus() > 0:
        args["router_local_encoder"] = False  # GPU Embedding replicas batch every request's encoding
        env_vars[VLLM_PYTHON_ENV] = GPU_VLLM_PYTHON  # in-cluster models' engines (llm_config)
    if spec.management_store is not None:
        args["management_store"] = spec.management_store.model_dump(mode="json", exclude_none=True)
    application = {
        "name": name,
        "route_prefix": "/",
        "import_path": "deployments.graph:build_app",
        "args": args,
        "runtime_env": {"env_vars": env_vars},
        "deployments": _deployments(checked),
    }
    return {
        "proxy_location": "EveryNode",
        "http_options": dict(_HTTP_OPTIONS),
        "logging_config": dict(_LOGGING),
        "applications": [application],
    }


def _ray_version() -> str:
    try:
        return version("ray")
    except PackageNotFoundError:
        return "2.60.0"


def _container(checked: CheckedResource, name: str, *, head: bool) -> dict[str, Any]:
    spec = checked.resource.spec
    # Serve runs a proxy on every pod (proxy_location EveryNode): workers expose `serve` too.
    ray_ports = RAY_PORTS if head else {SERVE_PORT: RAY_PORTS[SERVE_PORT]}
    ports = [{"containerPort": port, "name": port_name} for port, port_name in ray_ports.items()]
    ports.append({"containerPort": spec.metrics.port, "name": "router-metrics"})
    env = [{"name": k, "value": v} for k, v in CLUSTER_ENV.items()] + list(spec.env)
    return {
        "name": name,
        "image": spec.image.reference(),
        "imagePullPolicy": spec.image.pull_policy,
        "workingDir": WORKING_DIR,
        "env": env,
        "ports": ports,
        "resources": spec.resources.model_dump(mode="json", exclude_defaults=False),
    }


def _pod_template(checked: CheckedResource, container: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [container]}
    if checked.resource.spec.resources.gpus() > 0:
        pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    return {"spec": pod}


def _worker_group(checked: CheckedResource) -> dict[str, Any]:
    spec = checked.resource.spec
    scaling = spec.autoscaling
    if scaling.enabled:
        low, high = scaling.min_replicas, scaling.max_replicas
        replicas = spec.replicas if spec.replicas is not None else low
    else:
        low = high = replicas = spec.replicas if spec.replicas is not None else 1
    group = "gpu-workers" if spec.resources.gpus() > 0 else "workers"
    return {
        "groupName": group,
        "replicas": replicas,
        "minReplicas": low,
        "maxReplicas": high,
        "rayStartParams": {},
        "template": _pod_template(checked, _container(checked, "ray-worker", head=False)),
    }


def _cluster_config(checked: CheckedResource) -> dict[str, Any]:
    scaling = checked.resource.spec.autoscaling
    head = _container(checked, "ray-head", head=True)
    # Head pods run no GPU work (no GPU replicas are placed there): strip the GPU request.
    for key in ("requests", "limits"):
        head["resources"][key] = {k: v for k, v in head["resources"][key].items() if k != GPU_RESOURCE}
    cluster: dict[str, Any] = {
        "rayVersion": _ray_version(),
        # Ray 2.60 enables token auth; KubeRay (>= 1.5.1) generates the token Secret for every pod.
        "authOptions": {"mode": "token"},
        "enableInTreeAutoscaling": scaling.enabled,
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0"},
            "template": {"spec": {"containers": [head]}},
        },
        "workerGroupSpecs": [_worker_group(checked)],
    }
    if scaling.enabled:
        cluster["autoscalerOptions"] = {"upscalingMode": "Default", "idleTimeoutSeconds": 300}
    return cluster


def _metadata(checked: CheckedResource, name: str) -> dict[str, Any]:
    meta = checked.resource.metadata
    out: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "svc-sr", **meta.labels}}
    if meta.namespace:
        out["namespace"] = meta.namespace
    if meta.annotations:
        out["annotations"] = dict(meta.annotations)
    return out


def rayservice_manifest(checked: CheckedResource) -> dict[str, Any]:
    """The KubeRay RayService running the resource's router (pure: no I/O)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": _metadata(checked, checked.resource.metadata.name),
        "spec": {
            # A changed rayClusterConfig brings up a new cluster and switches when it is healthy.
            "upgradeStrategy": {"type": "NewCluster"},
            "serveConfigV2": _block_yaml(serve_config(checked)),
            "rayClusterConfig": _cluster_config(checked),
        },
    }


def _serve_service(name: str) -> dict[str, Any]:
    return {"name": f"{name}-serve-svc", "port": {"number": SERVE_PORT}}


def ingress_manifest(checked: CheckedResource) -> dict[str, Any] | None:
    """A networking.k8s.io/v1 Ingress to KubeRay's serve Service, when spec.ingress.enabled."""
    ingress = checked.resource.spec.ingress
    if not ingress.enabled:
        return None
    name = checked.resource.metadata.name
    metadata = _metadata(checked, name)
    if ingress.annotations:  # controller-specific settings belong on the Ingress, not the RayService
        metadata["annotations"] = {**metadata.get("annotations", {}), **ingress.annotations}
    rules = []
    for host in ingress.hosts:
        paths = [
            {"path": p.path, "pathType": p.path_type, "backend": {"service": _serve_service(name)}}
            for p in host.paths
        ]
        rule: dict[str, Any] = {"http": {"paths": paths}}
        if host.host:
            rule["host"] = host.host
        rules.append(rule)
    spec: dict[str, Any] = {"rules": rules}
    if ingress.class_name:
        spec["ingressClassName"] = ingress.class_name
    if ingress.tls:
        spec["tls"] = [t.model_dump(by_alias=True, exclude_none=True) for t in ingress.tls]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata, "spec": spec}


def httproute_manifest(checked: CheckedResource) -> dict[str, Any] | None:
    """A Gateway API HTTPRoute on spec.gateway.existingRef (that Gateway must allow routes from
    this namespace when it lives in another)."""
    gateway = checked.resource.spec.gateway
    if gateway is None or gateway.existing_ref is None:
        return None
    name = checked.resource.metadata.name
    ref = gateway.existing_ref
    backend = {"name": f"{name}-serve-svc", "port": SERVE_PORT}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": _metadata(checked, name),
        "spec": {
            "parentRefs": [{"name": ref.name, "namespace": ref.namespace}],
            "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [backend]}
            ],
        },
    }


def manifests(checked: CheckedResource) -> list[dict[str, Any]]:
    """Every object the resource becomes: the RayService, then its Ingress and HTTPRoute if any."""
    extra = [ingress_manifest(checked), httproute_manifest(checked)]
    return [rayservice_manifest(checked), *(m for m in extra if m is not None)]


def unmapped_fields(checked: CheckedResource) -> list[str]:
    """Resource fields given but not carried into the manifests (see the module docstring)."""
    notes = [f"spec.config: {w}" for w in checked.loaded.warnings]
    memory = checked.resource.spec.autoscaling.target_memory_utilization_percentage
    if memory is not None:
        notes.append(
            f"spec.autoscaling.targetMemoryUtilizationPercentage ({memory}) has no KubeRay/Serve "
            "equivalent and is ignored"
        )
    return notes


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (serveConfigV2) as `|` blocks, as a person would write them."""


def _str_block(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_block)


def _block_yaml(document: Any) -> str:
    return yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False)


def render(objects: list[dict[str, Any]]) -> str:
    """Objects as one multi-document YAML stream (`kubectl apply -f` takes it as is)."""
    return yaml.dump_all(objects, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False)


def load_resource(path: Path) -> CheckedResource:
    """Read and check a resource file; ResourceError (or ConfigError for bad YAML) on refusal."""
    source = str(path)
    return check_resource(parse_text(path.read_text(encoding="utf-8"), source=source), source=source)


@click.command("manifest")
@click.argument("path", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the manifest here instead of stdout.",
)
def kuberay_command(path: Path, output: Path | None) -> None:
    """Convert a SemanticRouter resource (vllm.ai/v1alpha1) into a KubeRay RayService manifest.

    Exit 2 with the refused fields named when the resource or its router config is invalid."""
    try:
        checked = load_resource(path)
    except (ResourceError, ConfigError) as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    for note in unmapped_fields(checked):
        click.echo(f"warning: {note}", err=True)
    text = render(manifests(checked))
    if output is None:
        click.echo(text, nl=False)
        return
    tmp = output.with_suffix(output.suffix + ".tmp")  # never leave a half-written manifest behind
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, output)
    click.echo(f"wrote {output}", err=True)
