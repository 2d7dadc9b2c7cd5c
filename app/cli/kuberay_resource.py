"""The declarative router resource (group version v1alpha1, docs/deploy.md) as pydantic models.

A resource is what the reference router's Kubernetes operator takes: `apiVersion:
vllm.ai/v1alpha1`, `kind: SemanticRouter`, `metadata` and a `spec` carrying the router
configuration (`spec.config`) next to the deployment fields (image, replicas, resources,
autoscaling, ingress, metrics port, gateway existingRef). `app/cli/kuberay.py` turns one into a
KubeRay RayService. Only the fields that conversion uses are accepted: every model forbids
unknown keys, so a misspelt or unsupported field is refused by name instead of being dropped
from what gets deployed.

`spec.config` is a svc-sr configuration document (canonical v0.3, or an older flat layout the
loader migrates) and is validated with `app.config.loader.parse_config`; its problems are
reported under `spec.config.<path>`. `spec.managementStore` is a svc-sr extension (the
`management_store` graph argument): where the management state of several Ingress replicas is
shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.config.errors import ConfigError, format_path
from app.config.loader import LoadedConfig, parse_config
from app.state.shared_store import ManagementStoreSettings

API_VERSION = "vllm.ai/v1alpha1"
KIND = "SemanticRouter"
# Kubernetes object names (RFC 1123 label): the RayService name prefixes the Services KubeRay makes.
# Ports every Ray pod already binds: the router's metrics port must differ (8080: Ray's metrics export).
RAY_PORTS = {6379: "gcs-server", 8265: "dashboard", 10001: "client", 8000: "serve", 8080: "ray-metrics"}
GPU_RESOURCE = "nvidia.com/gpu"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResourceError(ValueError):
    """A resource was refused; each line names the field (`spec.image.pullPolicy: ...`)."""

    def __init__(self, problems: list[str], *, source: str = "<memory>") -> None:
        self.problems = problems
        lines = [f"invalid {KIND} resource {source}:", *(f"  - {p}" for p in problems)]
        super().__init__("\n".join(lines))


class Metadata(_Strict):
    # What the API server adds to an exported object (uid, resourceVersion, ...) is not ours to copy.
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=63, pattern=_DNS_LABEL)
    namespace: str | None = Field(default=None, pattern=_DNS_LABEL)
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class ImageSpec(_Strict):
    repository: str = Field(default="ghcr.io/your-org/svc-sr", min_length=1)
    tag: str = Field(default="latest", min_length=1)
    pull_policy: Literal["Always", "Never", "IfNotPresent"] = Field(
        default="IfNotPresent", alias="pullPolicy"
    )
    # Optional registry prefix, as in the reference operator: <registry>/<repository>:<tag>.
    image_registry: str | None = Field(default=None, alias="imageRegistry")

    def reference(self) -> str:
        repository = (
            f"{self.image_registry.rstrip('/')}/{self.repository}" if self.image_registry else self.repository
        )
        return f"{repository}:{self.tag}"


class AutoscalingSpec(_Strict):
    enabled: bool = False
    min_replicas: int = Field(default=1, ge=0, alias="minReplicas")
    max_replicas: int = Field(default=10, ge=1, alias="maxReplicas")
    target_cpu_utilization_percentage: int = Field(
        default=80, ge=1, le=100, alias="targetCPUUtilizationPercentage"
    )
    target_memory_utilization_percentage: int | None = Field(
        default=None, ge=1, le=100, alias="targetMemoryUtilizationPercentage"
    )

    @model_validator(mode="after")
    def _bounds_ordered(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas ({self.min_replicas}) exceeds maxReplicas ({self.max_replicas})")
        return self


class IngressPath(_Strict):
    path: str = "/"
    path_type: Literal["Prefix", "Exact", "ImplementationSpecific"] = Field(
        default="Prefix", alias="pathType"
    )


class IngressHost(_Strict):
    host: str | None = None
    paths: list[IngressPath] = Field(default_factory=lambda: [IngressPath()])


class IngressTLS(_Strict):
    secret_name: str | None = Field(default=None, alias="secretName")
    hosts: list[str] = []


class IngressSpec(_Strict):
    enabled: bool = False
    class_name: str | None = Field(default=None, alias="className")
    annotations: dict[str, str] = {}
    hosts: list[IngressHost] = Field(default_factory=lambda: [IngressHost()])
    tls: list[IngressTLS] = []


class MetricsSpec(_Strict):
    enabled: bool = True
    port: int = Field(default=9190, ge=1, le=65535)

    @model_validator(mode="after")
    def _port_free(self) -> MetricsSpec:
        if self.port in RAY_PORTS:
            raise ValueError(f"port {self.port} is taken by Ray on every pod ({RAY_PORTS[self.port]})")
        return self


class GatewayReference(_Strict):
    name: str = Field(min_length=1)
    namespace: str = Field(min_length=1)


class GatewaySpec(_Strict):
    existing_ref: GatewayReference | None = Field(default=None, alias="existingRef")


class ResourceRequirements(_Strict):
    """corev1.ResourceRequirements: quantities as Kubernetes writes them ("4", 16Gi, 500m)."""

    requests: dict[str, str | int | float] = {}
    limits: dict[str, str | int | float] = {}

    @model_validator(mode="after")
    def _whole_gpus(self) -> ResourceRequirements:
        for kind, quantities in (("requests", self.requests), ("limits", self.limits)):
            value = str(quantities.get(GPU_RESOURCE, 0))
            if not value.isdigit():
                raise ValueError(f"{kind}.{GPU_RESOURCE} must be a whole number of GPUs, got {value!r}")
        return self

    def gpus(self) -> int:
        return int(self.limits.get(GPU_RESOURCE, self.requests.get(GPU_RESOURCE, 0)))


class RouterSpec(_Strict):
    config: dict[str, Any]
    image: ImageSpec = ImageSpec()
    replicas: int | None = Field(default=None, ge=0)
    resources: ResourceRequirements = ResourceRequirements(
        requests={"cpu": "4", "memory": "16Gi"}, limits={"cpu": "4", "memory": "16Gi"}
    )
    autoscaling: AutoscalingSpec = AutoscalingSpec()
    ingress: IngressSpec = IngressSpec()
    metrics: MetricsSpec = MetricsSpec()
    gateway: GatewaySpec | None = None
    env: list[dict[str, Any]] = []
    management_store: ManagementStoreSettings | None = Field(default=None, alias="managementStore")

    @model_validator(mode="after")
    def _replicas_within_bounds(self) -> RouterSpec:
        scaling = self.autoscaling
        replicas = self.replicas
        if (
            scaling.enabled
            and replicas is not None
            and not scaling.min_replicas <= replicas <= scaling.max_replicas
        ):
            raise ValueError(
                f"replicas ({replicas}) must lie within autoscaling minReplicas..maxReplicas "
                f"({scaling.min_replicas}..{scaling.max_replicas})"
            )
        return self


class SemanticRouterResource(_Strict):
    api_version: Literal["vllm.ai/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SemanticRouter"]
    metadata: Metadata
    spec: RouterSpec


@dataclass(frozen=True)
class CheckedResource:
    """A resource whose spec.config passed the configuration loader."""

    resource: SemanticRouterResource
    loaded: LoadedConfig


def check_resource(document: Any, *, source: str = "<memory>") -> CheckedResource:
    """Validate a resource document; ResourceError names every refused field."""
    if not isinstance(document, dict):
        raise ResourceError(
            [f"(resource): a resource is a mapping, got {type(document).__name__}"], source=source
        )
    try:
        resource = SemanticRouterResource.model_validate(document)
    except ValidationError as exc:
        # "Value error, " is how pydantic prefixes our own validators' messages: noise to a reader.
        problems = [
            f"{format_path(e['loc']) or '(resource)'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        ]
        raise ResourceError(problems, source=source) from None
    try:
        loaded = parse_config(resource.spec.config, source=f"{source} spec.config")
    except ConfigError as exc:
        problems = [f"spec.config.{issue.path or '(document)'}: {issue.message}" for issue in exc.issues]
        raise ResourceError(problems, source=source) from None
    return CheckedResource(resource=resource, loaded=loaded)
