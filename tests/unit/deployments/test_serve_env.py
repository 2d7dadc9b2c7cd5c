"""The Serve fast-path environment (deployments/serve_env.py)."""

from __future__ import annotations

import pytest

from deployments.serve_env import FAST_PATH_KEYS, apply_fast_path_env, fast_path_env


def test_sets_every_key_once_and_keeps_what_the_user_set() -> None:
    env = {"RAY_SERVE_HAPROXY_NBTHREAD": "8"}
    applied = apply_fast_path_env(env)
    assert set(applied) == set(FAST_PATH_KEYS) - {"RAY_SERVE_HAPROXY_NBTHREAD"}
    assert env["RAY_SERVE_HAPROXY_NBTHREAD"] == "8"
    assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == env["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert env["MALLOC_ARENA_MAX"] == "2"  # what Ray's processes, the sidecar and Envoy inherit
    assert apply_fast_path_env(env) == {}  # a second call changes nothing


def test_switched_off() -> None:
    env = {"SVC_SR_SERVE_FAST_PATH": "0"}
    assert apply_fast_path_env(env) == {}
    assert env == {"SVC_SR_SERVE_FAST_PATH": "0"}


def test_instances_get_their_own_files_and_ports_with_a_short_socket_path() -> None:
    first, second = fast_path_env(), fast_path_env()
    assert set(first) == set(FAST_PATH_KEYS)
    for key in (
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC",
        "RAY_SERVE_HAPROXY_STATS_PORT",
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
    ):
        assert first[key] != second[key]
    # Serve nests a 56-character hash directory; HAProxy refuses admin sockets over 97 characters.
    base = first["RAY_SERVE_HAPROXY_SERVER_STATE_BASE"]
    assert len(base) + 1 + 56 + len("/admin.sock") <= 97


def test_serve_starts_the_fallback_proxy_at_the_instances_own_ports() -> None:
    """Serve's fallback proxy binds its ports with SO_REUSEPORT: at Serve's defaults (8500, 9500)
    two Ray instances on one machine share them and a request one sends during an activation can
    reach the other (tests/integration/test_own_models.py). Pins that Serve reads the variables."""
    import os
    import subprocess
    import sys

    env = fast_path_env()
    ports = {int(env["RAY_SERVE_FALLBACK_PROXY_HTTP_PORT"]), int(env["RAY_SERVE_FALLBACK_PROXY_GRPC_PORT"])}
    assert len(ports) == 2 and not ports & {8500, 9500}
    code = (
        "from ray.serve._private import constants as c\n"
        "print(c.RAY_SERVE_FALLBACK_PROXY_HTTP_PORT, c.RAY_SERVE_FALLBACK_PROXY_GRPC_PORT)\n"
    )
    read = subprocess.run(
        [sys.executable, "-c", code],
        env=os.environ | env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    assert read == [env["RAY_SERVE_FALLBACK_PROXY_HTTP_PORT"], env["RAY_SERVE_FALLBACK_PROXY_GRPC_PORT"]]


def test_haproxy_resends_a_request_whose_ingress_replica_died_everywhere_serve_runs() -> None:
    """tests/integration/test_faults.py: the request goes to another replica instead of failing."""
    from pathlib import Path

    import yaml

    from deployments.serve_env import HAPROXY_RETRY_ON

    assert set(HAPROXY_RETRY_ON.split()) == {"conn-failure", "empty-response"}
    assert fast_path_env()["RAY_SERVE_HAPROXY_RETRY_ON"] == HAPROXY_RETRY_ON
    cluster = Path(__file__).resolve().parents[3] / "cluster"
    ray_up = yaml.safe_load((cluster / "ray-cluster.yaml").read_text())
    for commands in (ray_up["head_start_ray_commands"], ray_up["worker_start_ray_commands"]):
        assert f"RAY_SERVE_HAPROXY_RETRY_ON='{HAPROXY_RETRY_ON}'" in next(
            c for c in commands if "ray start" in c
        )
    service = yaml.safe_load((cluster / "kuberay-rayservice.yaml").read_text())["spec"]["rayClusterConfig"]
    groups = [service["headGroupSpec"], *service["workerGroupSpecs"]]
    for group in groups:
        env = {e["name"]: e["value"] for e in group["template"]["spec"]["containers"][0]["env"]}
        assert env["RAY_SERVE_HAPROXY_RETRY_ON"] == HAPROXY_RETRY_ON


def test_serve_loads_without_pandas_and_pandas_still_imports() -> None:
    """import_serve: Serve's optional pandas import (~32 MiB per process) is skipped; pymilvus
    (the Milvus stores) still imports pandas after it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from deployments.serve_env import import_serve\n"
        "import_serve()\n"
        "from ray import serve\n"
        "assert 'pandas' not in sys.modules\n"
        "import pandas\n"
        "from ray.serve._private.utils import serve_encoders\n"
        "assert pandas.DataFrame not in serve_encoders\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_local_ray_workers_run_the_lean_import_first() -> None:
    from deployments.serve_env import LEAN_WORKER_ENV, import_serve

    module, _, name = LEAN_WORKER_ENV["worker_process_setup_hook"].rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) is import_serve


def test_local_options_start_what_no_local_request_calls_on_demand() -> None:
    """One machine's graph: Embedding, DomainClassifier, DecisionModel and Storage scale from
    zero; the serve config's other options stay, the other deployments are untouched; switched
    off by env."""
    from deployments.activation import scales_to_zero
    from deployments.serve_env import local_deployment_options

    cluster = {
        "Embedding": {"max_ongoing_requests": 128, "autoscaling_config": {"min_replicas": 1}},
        "DomainClassifier": {"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.05}},
        "Ingress": {"num_replicas": 2},
        "Storage": {"num_replicas": 1, "max_ongoing_requests": 64},
    }
    local_flags = {"router_local_encoder": True, "router_local_heads": True}
    local = local_deployment_options(cluster, environ={}, **local_flags)
    assert scales_to_zero(local) == {"Embedding", "DomainClassifier", "DecisionModel", "Storage"}
    assert local["Storage"]["max_ongoing_requests"] == 64 and "num_replicas" not in local["Storage"]
    assert local["Embedding"]["max_ongoing_requests"] == 128
    assert local["DomainClassifier"]["ray_actor_options"] == {"num_cpus": 0.05}
    assert "num_replicas" not in local["DomainClassifier"] and local["Ingress"] == {"num_replicas": 2}
    assert cluster["Embedding"]["autoscaling_config"] == {"min_replicas": 1}  # the input is not changed
    assert local_deployment_options(cluster, environ={"SVC_SR_ON_DEMAND": "0"}, **local_flags) == cluster


@pytest.mark.parametrize(
    ("encoder", "heads", "expected"),
    [
        (False, True, {"DomainClassifier", "DecisionModel", "Storage"}),
        (True, False, {"Embedding", "DecisionModel", "Storage"}),
        (False, False, {"DecisionModel", "Storage"}),
    ],
)
def test_a_deployment_the_router_calls_on_every_request_is_never_on_demand(
    encoder: bool, heads: bool, expected: set[str]
) -> None:
    """A graph whose Router sends each request to Embedding (GPU batching) or to the classifiers
    keeps them started: a request must not wait for a replica to start."""
    from deployments.activation import scales_to_zero
    from deployments.serve_env import local_deployment_options

    local = local_deployment_options({}, router_local_encoder=encoder, router_local_heads=heads, environ={})
    assert scales_to_zero(local) == expected


def test_storage_starts_on_its_first_call_and_then_stays() -> None:
    """At most one Storage replica (it owns its records and chunks), none until called, and a
    scale-down that never comes once it runs (a memory vector store's chunks would be lost);
    the graph keeps it so (deployments/rollout.py single_replica: no surge, never two)."""
    from ray.serve.config import AutoscalingConfig

    from deployments.rollout import single_replica
    from deployments.serve_env import ON_DEMAND, local_deployment_options

    local = local_deployment_options({}, router_local_encoder=True, router_local_heads=True, environ={})
    scaling = local["Storage"]["autoscaling_config"]
    assert scaling["min_replicas"] == scaling["initial_replicas"] == 0 and scaling["max_replicas"] == 1
    assert scaling["downscale_delay_s"] >= 365 * 24 * 3600 > ON_DEMAND["downscale_delay_s"]
    AutoscalingConfig.model_validate(scaling)  # what Serve checks when the graph is deployed
    graph_options = single_replica(local["Storage"], "Storage", "why")
    assert graph_options == {"autoscaling_config": scaling, "max_surge_percent": 0}
