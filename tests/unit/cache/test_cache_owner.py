"""One owner for a store one process must own (docs/configuration.md "One owner"), without Ray: the
rule that says which response-cache backends need it (app/cache/factory.py `single_owner`), the
Serve options it gives (deployments/rollout.py `single_replica`: one replica, no surge), and the
graph applying it on every path that builds it (the file at start, a resumed or activated
document), whatever the Serve config asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.serve.deployment import deployment_to_schema

from app.cache.factory import single_owner
from app.config.global_config import ResponseCacheConfig
from app.management.rollout import scaled_owner
from deployments.graph import GraphArgs, build_app, build_graph
from deployments.ray_compat import bound_deployment
from deployments.rollout import SURGE_PERCENT, single_replica
from deployments.versioning import graph_nodes

ROOT = Path(__file__).resolve().parents[3]
SERVER = "http://127.0.0.1:19530"


@pytest.mark.parametrize(
    ("settings", "owned"),
    [
        ({"backend_type": "memory"}, True),
        ({"backend_type": "redis"}, False),
        ({"backend_type": "milvus"}, True),  # no uri, no host: Milvus Lite in the state directory
        ({"backend_type": "milvus", "milvus": {"uri": "/var/lib/svc-sr/cache.db"}}, True),
        ({"backend_type": "milvus", "milvus": {"uri": "./cache.db"}}, True),
        ({"backend_type": "milvus", "milvus": {"uri": SERVER}}, False),
        ({"backend_type": "milvus", "milvus": {"uri": "HTTPS://milvus.internal:443"}}, False),
        ({"backend_type": "milvus", "milvus": {"uri": "unix:/run/milvus.sock"}}, False),
        ({"backend_type": "milvus", "milvus": {"host": "milvus.internal"}}, False),
        ({"backend_type": "hybrid"}, True),  # its store of record is Milvus (Lite) by default
        ({"backend_type": "hybrid", "milvus": {"uri": SERVER}}, False),
        ({"backend_type": "hybrid", "hybrid_store": "redis"}, False),  # a front per replica is by design
        # A Milvus Lite section that the chosen backend does not use does not pin it.
        ({"backend_type": "redis", "milvus": {"uri": "./cache.db"}}, False),
    ],
)
def test_which_backends_need_one_owner(settings: dict[str, Any], owned: bool) -> None:
    reason = single_owner(ResponseCacheConfig.model_validate(settings))
    assert (reason is not None) == owned, reason


def test_one_replica_without_surge_whatever_the_serve_config_asks() -> None:
    asked = {
        "num_replicas": 3,
        "autoscaling_config": {"min_replicas": 1, "max_replicas": 4},
        "max_surge_percent": 100,
        "max_ongoing_requests": 1024,
    }
    assert single_replica(asked, "ResponseCache", "why") == {
        "num_replicas": 1,
        "max_surge_percent": 0,
        "max_ongoing_requests": 1024,
    }
    # Even when nothing was asked: the class's own surge default must not apply to an owner.
    assert single_replica({}, "Storage", "why") == {"num_replicas": 1, "max_surge_percent": 0}
    # Autoscaling up to one replica (started on its first call) is still one owner: kept.
    on_demand = {"num_replicas": 1, "autoscaling_config": {"min_replicas": 0, "max_replicas": 1}}
    assert single_replica(on_demand, "Storage", "why") == {
        "autoscaling_config": {"min_replicas": 0, "max_replicas": 1},
        "max_surge_percent": 0,
    }


def cache_options(graph: Any) -> dict[str, Any]:
    node = next(n for n in graph_nodes(graph) if bound_deployment(n).name == "ResponseCache")
    schema = deployment_to_schema(bound_deployment(node))  # what `serve build` would write for it
    options = {
        key: getattr(schema, key) for key in ("num_replicas", "max_surge_percent", "autoscaling_config")
    }
    return {key: value if isinstance(value, int | dict) else None for key, value in options.items()}


# The shipped Serve config's ResponseCache entry (cluster/serve-config.yaml: `svc-sr serve` reads it).
SCALED = {"ResponseCache": {"num_replicas": 2, "max_ongoing_requests": 1024}}
ONE_OWNER = {"num_replicas": 1, "max_surge_percent": 0, "autoscaling_config": None}


SHARED = {**ONE_OWNER, "num_replicas": 2, "max_surge_percent": SURGE_PERCENT}


def document_with(store: dict[str, Any]) -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "configs" / "config.yaml").read_text())
    document["global"]["stores"]["response_cache"] = {"enabled": True, **store}
    return dict(document)


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        ({"backend_type": "memory"}, ONE_OWNER),
        ({"backend_type": "milvus"}, ONE_OWNER),
        ({"backend_type": "hybrid"}, ONE_OWNER),
        ({"backend_type": "milvus", "milvus": {"uri": SERVER}}, SHARED),
        ({"backend_type": "redis"}, SHARED),
    ],
)
@pytest.mark.slow
def test_the_graph_applies_the_rule_on_every_path_that_builds_it(
    store: dict[str, Any], expected: dict[str, Any], tmp_path: Path
) -> None:
    """The file at start (`build_app`), and the document of an activation (PATCH, PUT, rollback)
    or of a start that resumes the stored version (`build_graph(args, document=...)`)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(document_with(store)))
    from_file = GraphArgs(config_path=str(config), deployments=SCALED)
    assert cache_options(build_app(from_file)) == expected
    from_document = GraphArgs(config_path=str(ROOT / "configs" / "config.yaml"), deployments=SCALED)
    assert cache_options(build_graph(from_document, document=document_with(store))) == expected


def test_an_application_from_a_serve_config_refuses_an_owned_store_it_scales() -> None:
    """`serve deploy`: the Serve config's options win over the graph's and an activation carries
    only user_config, so a PATCH that needs one owner where that config asks for more replicas is
    refused (activation code restart_required) instead of running two openers."""
    lite, server = document_with({"backend_type": "milvus"}), document_with({"backend_type": "redis"})
    two = {"deployments": [{"name": "ResponseCache", "num_replicas": 2}]}
    reason = scaled_owner(two, lite)
    assert reason is not None and "num_replicas 2" in reason and "Milvus Lite" in reason
    autoscaled = {"deployments": [{"name": "ResponseCache", "autoscaling_config": {"max_replicas": 3}}]}
    assert scaled_owner(autoscaled, lite) is not None
    assert scaled_owner(two, server) is None  # a shared store scales
    assert scaled_owner({"deployments": [{"name": "ResponseCache", "num_replicas": 1}]}, lite) is None
    assert scaled_owner({"deployments": [{"name": "Router", "num_replicas": 2}]}, lite) is None
