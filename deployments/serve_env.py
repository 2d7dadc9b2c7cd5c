"""Ray Serve's fast request path, set up before `ray.init` starts a local instance.

Measured on 2 cores (bench/bench_routing.py, docs/performance.md): the default Serve
path costs ~5 ms per hop for the HTTP proxy actor alone (`GET /health` 5 ms through
the proxy, 1 ms direct) and ~4.5 ms per DeploymentHandle call. Serve's throughput-optimized
mode runs handle calls over gRPC with user code on the replica's event loop (~2 ms a
hop), and HAProxy mode puts a C load balancer in front of the Ingress replicas' own HTTP
servers (direct ingress) instead of the Python proxy actor.

The variables are read by the Serve controller and replicas at import, so they must be
in the environment of the process that starts Ray (children inherit it); on a cluster
they go on the `ray start` command line (cluster/ray-cluster.yaml). Every value is a
default: a variable already set wins, and `SVC_SR_SERVE_FAST_PATH=0` turns all of it off.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from app.common.optional_imports import without_modules
from app.common.ports import free_port
from app.common.ray_settings import CLUSTER_ENV, HAPROXY_RETRY_ON

__all__ = [
    "CLUSTER_ENV",
    "FAST_PATH_KEYS",
    "HAPROXY_RETRY_ON",
    "LEAN_WORKER_ENV",
    "on_demand_deployments",
    "apply_fast_path_env",
    "fast_path_env",
    "import_serve",
    "local_deployment_options",
]


def fast_path_env() -> dict[str, str]:
    """The variables for one local Ray instance. HAProxy's files and its stats and metrics
    ports are per instance, so a test run and a `svc-sr serve` on one machine don't collide.
    The directory is short and absolute: Serve nests a 56-character hash under it and HAProxy
    refuses an admin socket path over 97 characters."""
    haproxy_dir = Path(tempfile.mkdtemp(prefix="svcsr-hap-", dir="/tmp"))
    return {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": CLUSTER_ENV["RAY_SERVE_THROUGHPUT_OPTIMIZED"],
        "RAY_SERVE_ENABLE_HA_PROXY": CLUSTER_ENV["RAY_SERVE_ENABLE_HA_PROXY"],
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(haproxy_dir / "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": str(haproxy_dir / "admin.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(haproxy_dir),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(haproxy_dir / "server-state"),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
        # The fallback proxy HAProxy uses while an activation reconfigures the only Ingress: on Serve's
        # fixed SO_REUSEPORT ports another Ray instance answered (404) a share of it (docs/management-api.md).
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(free_port()),
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(free_port()),
        # Two threads are plenty for one laptop's traffic and leave the cores to the models.
        "RAY_SERVE_HAPROXY_NBTHREAD": "2",
        "RAY_SERVE_HAPROXY_RETRY_ON": CLUSTER_ENV["RAY_SERVE_HAPROXY_RETRY_ON"],
        # Every body up to the largest max_body_bytes reaches the Router (app/common/ray_settings.py).
        "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": CLUSTER_ENV["RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"],
        # An Ingress replica stays up this long after it stops taking requests, so load
        # balancers elsewhere notice. HAProxy on this node drops it within ~0.1 s; Serve's 30 s
        # default only made every `svc-sr stop` and test teardown wait 30 s. Clusters keep 30 s.
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "0.5",
        # The controller's reconcile loop every 0.5 s, not 0.1 s: its passes cost CPU the request
        # path needs on two cores (c=1 p50 15.4-17.1 against 18.3-20.2 ms, docs/performance.md
        # "Defaults chosen"); autoscaling acts on windows of seconds. Clusters keep the default.
        "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
        # Ray keeps up to one idle worker process per CPU for the next task or actor; svc-sr
        # runs none but its replicas, so an idle one only held ~45 MiB (docs/performance.md
        # "Memory of the local stack"). A replica started on demand starts its own worker.
        "RAY_num_workers_soft_limit": "0",
        # glibc's malloc arenas capped at two per process: 8-29 MiB less in six alternating pairs, no
        # rate change (docs/performance.md "Memory of the local stack"); Ray's processes inherit it.
        "MALLOC_ARENA_MAX": "2",
    }


FAST_PATH_KEYS = (
    "RAY_SERVE_THROUGHPUT_OPTIMIZED",
    "RAY_SERVE_ENABLE_HA_PROXY",
    "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC",
    "RAY_SERVE_HAPROXY_SOCKET_PATH",
    "RAY_SERVE_HAPROXY_SERVER_STATE_BASE",
    "RAY_SERVE_HAPROXY_SERVER_STATE_FILE",
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
    "RAY_SERVE_HAPROXY_NBTHREAD",
    "RAY_SERVE_HAPROXY_RETRY_ON",
    "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S",
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S",
    "RAY_num_workers_soft_limit",
    "MALLOC_ARENA_MAX",
)


def apply_fast_path_env(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put the fast-path defaults into `environ` (os.environ by default); returns what was set."""
    env = os.environ if environ is None else environ
    if env.get("SVC_SR_SERVE_FAST_PATH", "1") == "0":
        return {}
    if all(key in env for key in FAST_PATH_KEYS):  # already set up (an earlier call, the user)
        return {}
    applied = {key: value for key, value in fast_path_env().items() if key not in env}
    env.update(applied)
    return applied


def import_serve() -> None:
    """Import Ray Serve without pandas. Serve's utils import pandas, if installed (pymilvus
    installs it), only to encode DataFrame answers, which svc-sr never returns: ~32 MiB per
    process that loads Serve (the controller, the proxies, every replica, the driver and the
    sidecar; docs/performance.md "Memory of the local stack"). pandas stays importable after
    it, for the Milvus stores. Call before the process's first `from ray import serve`."""
    with without_modules("pandas"):
        importlib.import_module("ray.serve._private.utils")


# The job runtime_env of a local `svc-sr serve`: every Ray worker (Serve's controller and
# proxies, every replica) runs import_serve() before its actor's class is loaded. A deployment
# with a runtime_env of its own keeps this key unless it sets one.
LEAN_WORKER_ENV = {"worker_process_setup_hook": f"{__name__}.import_serve"}


# One machine's `svc-sr serve` (cluster files keep their own options, as `serve deploy` reads
# them): what the local graph never calls on a request starts on its first call instead of at
# start. Which those are follows from the graph's own switches (GraphArgs router_local_*): a
# Router that encodes and runs the heads itself calls Embedding and DomainClassifier only for
# the diagnostics (texts without vectors); DecisionModel answers only /v1/decisions and
# /v1/systemone. ~460 MiB of the stack's memory (docs/performance.md "Memory of the local
# stack"). Serve starts a replica when a call queues (its first call waits for the replica's
# start, seconds to load its model) and stops it after 10 idle minutes. Still in the graph, the
# dashboard and `serve status`. SVC_SR_ON_DEMAND=0 starts them all at start.
ON_DEMAND = {
    "min_replicas": 0,
    "initial_replicas": 0,
    "max_replicas": 1,
    "upscale_delay_s": 0,
    "downscale_delay_s": 600,
}


# Storage (files and vector stores) answers the storage routes and the `rag` plugin's retrieval,
# no other request, so it too starts on its first call (a Router whose configuration retrieves
# from a vector store makes that call when the configuration arrives, not on a request). Once
# started it stays: it owns the records file, the ingestion worker and, on a memory backend, the
# chunks, which a scale-down would lose. ~100 MiB (docs/performance.md "Memory of the local stack").
KEPT_ONCE_STARTED = ON_DEMAND | {"downscale_delay_s": 365 * 24 * 3600.0}


def on_demand_deployments(*, router_local_encoder: bool, router_local_heads: bool) -> tuple[str, ...]:
    """The deployments no request of this graph calls: the Router calls Embedding unless it
    encodes itself, and DomainClassifier unless it runs the heads itself."""
    names = ["DecisionModel"]
    if router_local_encoder:
        names.insert(0, "Embedding")
    if router_local_heads:
        names.insert(-1, "DomainClassifier")
    return tuple(names)


def local_deployment_options(
    options: dict[str, dict[str, Any]],
    *,
    router_local_encoder: bool,
    router_local_heads: bool,
    environ: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """`options` (a serve config's per-deployment entries) with the one-machine defaults above:
    what no request calls, and Storage, start on their first call."""
    env = os.environ if environ is None else environ
    if env.get("SVC_SR_ON_DEMAND", "1") == "0":
        return options
    local = dict(options)
    on_demand = on_demand_deployments(
        router_local_encoder=router_local_encoder, router_local_heads=router_local_heads
    )
    for name in on_demand:
        kept = {
            k: v for k, v in options.get(name, {}).items() if k not in ("num_replicas", "autoscaling_config")
        }
        local[name] = kept | {"autoscaling_config": dict(ON_DEMAND)}
    storage = {k: v for k, v in options.get("Storage", {}).items() if k != "num_replicas"}
    local["Storage"] = storage | {"autoscaling_config": dict(KEPT_ONCE_STARTED)}
    return local
