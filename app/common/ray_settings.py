"""The Ray Serve settings every node of a cluster starts with (one list for the cluster files,
the KubeRay manifest svc-sr writes and the local fast path of deployments/serve_env.py)."""

from __future__ import annotations

from app.common.body_limits import MAX_BODY_BYTES_LIMIT

# What HAProxy re-sends to another Ingress replica. Serve's default, `conn-failure`, covers only
# requests that never reached a replica. A request in flight on a replica that dies (killed, its
# node lost) got no answer: HAProxy closed the client's connection (4 and 5 requests per kill in
# tests/integration/test_faults.py), or answered with its error page (Serve's plain-text 500;
# deployments/error_page.py). With `empty-response` it sends the request to another replica
# instead: in 7 kills of that test, 1 request failed in 2 of them, none in the others. HAProxy
# keeps a copy only of requests up to tune.bufsize (16 KiB) for this; the upstream may see such a
# request twice, as after a client's own retry. A stream whose answer had begun cannot be sent
# again: its connection ends.
HAPROXY_RETRY_ON = "conn-failure empty-response"

# The largest gRPC message a replica takes. In throughput-optimized mode every handle call is a
# gRPC message, and Serve keeps gRPC's 4 MiB default for what a replica receives: a body the
# front door accepted then failed on its way to the Router (a 4.3 MB prompt answered 500). A
# call carries the body once, plus the plan around it: twice the largest body any configuration
# may accept is room enough.
REPLICA_GRPC_MAX_MESSAGE_BYTES = 2 * MAX_BODY_BYTES_LIMIT

# What every node of a cluster starts Ray with (cluster/ray-cluster.yaml's `ray start` lines, the
# KubeRay containers app/cli/kuberay.py writes). The per-instance HAProxy files and fallback proxy
# ports and the local tunings of deployments/serve_env.py are left to Serve's defaults there: a
# cluster node runs one Ray instance, and its head has spare cores.
CLUSTER_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_HAPROXY_RETRY_ON": HAPROXY_RETRY_ON,
    "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(REPLICA_GRPC_MAX_MESSAGE_BYTES),
}
