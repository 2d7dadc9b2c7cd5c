"""The multi-node scenario of tests/integration/test_multinode.py, run in its own process.

A Ray cluster of three nodes on this machine (`ray.cluster_utils.Cluster`: a head and two
workers, each its own raylet), the svc-sr graph on it with 2 Ingress and 2 Router replicas
(at most one of each per node) over one Redis for the management state and the response
cache. It records what a client sees; the test asserts on the report:

1. a PATCH through the proxy, then the ETag that each Ingress replica (told apart by the
   status document's instance_id) answers;
2. a prompt answered once (stored in the shared cache);
3. load from several clients, then the removal of a worker node that holds an Ingress
   replica while the load runs: the requests in flight while the node went (Serve's proxy
   answers those that were inside the lost replica with a 500; they are reported, not
   asserted) and the requests sent after the removal;
4. after the removal: the versions, the audit entries and the repeated prompt.

Its own process because a Python process holds one Ray driver, and the session's
integration stack (tests/integration/conftest.py) is one already.

    python -m tests.integration.multinode_scenario REPORT.json REDIS_URL UPSTREAM_URL
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from app.common.ports import free_port
from tests.fakes.configs import cached_route, redis_store

CLIENTS = 4
PROMPT = "multinode cache check: what is the boiling point of water at sea level?"
READY_TIMEOUT_S = 420.0


class Load:
    """Clients sending chat requests back to back; each outcome with the time it was sent."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.stop = threading.Event()
        self.outcomes: list[tuple[float, str | None]] = []  # (sent at, failure or None)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def start(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def _run(self, client_id: int) -> None:
        client = openai.OpenAI(base_url=f"{self.base}/v1", api_key="unused", max_retries=0, timeout=60)
        i = 0
        while not self.stop.is_set():
            i += 1
            sent = time.monotonic()
            failure = None
            try:
                client.chat.completions.create(
                    model="MoM",
                    messages=[{"role": "user", "content": f"load {client_id}-{i}: say hi"}],
                    # the load's answers stay out of the cache: its entry count is what the
                    # removal must not change
                    extra_headers={"x-vsr-cache-control": "no-store"},
                )
            except Exception as exc:
                failure = f"{type(exc).__name__}: {exc}"[:300]
            with self.lock:
                self.outcomes.append((sent, failure))

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=90)


def running_replicas(app: str, deployment: str) -> int:
    from ray import serve

    status = serve.status().applications[app].deployments[deployment]
    return int({str(getattr(k, "value", k)): v for k, v in status.replica_states.items()}.get("RUNNING", 0))


def wait_ready(base: str, app: str) -> None:
    """/ready answers 200 and both Ingress and both Router replicas run."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            ready = httpx.get(f"{base}/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            ready = False
        if ready and running_replicas(app, "Ingress") == 2 and running_replicas(app, "Router") == 2:
            return
        time.sleep(1.0)
    raise RuntimeError(f"{base}/ready not 200 with 2 Ingress and 2 Router replicas after {READY_TIMEOUT_S}s")


def etags_by_replica(base: str, rounds: int = 40) -> dict[str, str]:
    """instance_id -> the ETag that replica's GET /api/v1/config answered (fresh connections,
    so the proxy spreads them over the replicas)."""
    seen: dict[str, str] = {}
    for _ in range(rounds):
        with httpx.Client(base_url=base, timeout=30) as client:
            instance = client.get("/api/v1/status").json()["instance_id"]
            tag = client.get("/api/v1/config").headers["etag"]
        seen.setdefault(instance, tag)
    return seen


def ingress_nodes(dashboard: str) -> dict[str, str]:
    """node id -> Ingress replica actor name, for the live Ingress replicas."""
    from ray.util.state import list_actors

    actors = list_actors(address=dashboard, filters=[("state", "=", "ALIVE")], limit=1000)
    return {a.node_id: a.name for a in actors if "Ingress" in (a.name or "")}


def cache_entries(base: str) -> int:
    with httpx.Client(base_url=base, timeout=60) as client:
        return int(client.get("/api/v1/storage/response-cache/stats").json()["entries"])


def wait_for_hit(base: str, timeout_s: float = 30.0) -> str | None:
    """The first answer's cache write lands after the answer was sent: ask until it hits."""
    deadline = time.monotonic() + timeout_s
    while (hit := ask_cached(base)) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    return hit


def history(base: str) -> tuple[list[str], list[list[Any]]]:
    """The version ids and the audit entries (sequence, prev_hash, hash) as the API shows them."""
    with httpx.Client(base_url=base, timeout=60) as client:
        versions = [v["version"] for v in client.get("/api/v1/config/versions").json()["versions"]]
        entries = client.get("/api/v1/observability/audit", params={"limit": 1000}).json()["entries"]
    return versions, [[e["sequence"], e["prev_hash"], e["hash"]] for e in entries]


def ask_cached(base: str) -> str | None:
    chat = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    answer = chat.chat.completions.with_raw_response.create(
        model="MoM", messages=[{"role": "user", "content": PROMPT}]
    )
    return answer.headers.get("x-vsr-cache-hit")


def patch_through_one_replica(base: str, report: dict[str, Any]) -> None:
    report["etags_before"] = etags_by_replica(base)
    with httpx.Client(base_url=base, timeout=120) as client:
        tag = client.get("/api/v1/config").headers["etag"]
        patched = client.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
    report["patch"] = {
        "status": patched.status_code,
        "etag": patched.headers.get("etag"),
        "body": patched.text,
    }
    report["etags_after"] = etags_by_replica(base)


def remove_an_ingress_node_under_load(
    base: str, cluster: Any, workers: list[Any], dashboard: str, report: dict[str, Any]
) -> None:
    nodes = ingress_nodes(dashboard)
    report["ingress_nodes"] = {"ingress": nodes, "workers": [w.node_id for w in workers]}
    victim = next(w for w in workers if w.node_id in nodes)
    load = Load(base).start()
    time.sleep(5.0)  # the load runs on both replicas before the node goes
    removing = time.monotonic()
    cluster.remove_node(victim, allow_graceful=False)
    wait_node_dead(victim.node_id)
    # The node is out of the cluster once Ray has marked it dead (its raylet is killed at once,
    # its worker processes die with it a moment later): requests sent from here on were sent
    # after the removal; the ones before were in flight while it went.
    removed = time.monotonic()
    report["removal_s"] = round(removed - removing, 2)
    time.sleep(20.0)
    load.finish()
    report["requests_before_removal"] = sum(1 for sent, _ in load.outcomes if sent < removing)
    report["in_flight_failures"] = [f for sent, f in load.outcomes if sent < removed and f is not None]
    report["after_removal"] = {
        "sent": sum(1 for sent, _ in load.outcomes if sent >= removed),
        "failures": [f for sent, f in load.outcomes if sent >= removed and f is not None],
    }


def wait_node_dead(node_id: str, timeout_s: float = 120.0) -> None:
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"node {node_id} still alive {timeout_s}s after its removal")


def graph_args(redis_url: str, upstream_url: str) -> Any:
    from deployments.graph import GraphArgs

    spread = {"num_replicas": 2, "max_replicas_per_node": 1}
    return GraphArgs(
        config=cached_route(upstream_url, "multinode", redis_store(redis_url, f"multinode_{time.time_ns()}")),
        app_name="multinode",
        management_store={"backend": "redis", "url": redis_url},
        metrics={"enabled": False},
        decision_model=False,
        deployments={"Ingress": spread, "Router": spread, "ResponseCache": spread},
    )


def main(report_path: str, redis_url: str, upstream_url: str) -> None:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from deployments.graph import build_app

    report: dict[str, Any] = {}
    dashboard_port = free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            # No replica on the head (only the Serve controller and the proxy): the proxy prefers
            # replicas on its own node, so a replica there would take all the traffic.
            "num_cpus": 0,
            "include_dashboard": True,  # the state API (which node holds which replica) needs it
            "dashboard_host": "127.0.0.1",
            "dashboard_port": dashboard_port,
        },
    )
    workers = [cluster.add_node(num_cpus=3) for _ in range(2)]
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port, "location": "HeadOnly"})
        serve.run(build_app(graph_args(redis_url, upstream_url)), name="multinode", route_prefix="/")
        base = f"http://127.0.0.1:{port}"
        wait_ready(base, "multinode")
        patch_through_one_replica(base, report)
        report["first_answer_cache_hit"] = ask_cached(base)  # into the shared cache
        report["hit_before_removal"] = wait_for_hit(base)
        report["cache_entries_before"] = cache_entries(base)
        report["versions_before"], report["audit_before"] = history(base)
        remove_an_ingress_node_under_load(
            base, cluster, workers, f"http://127.0.0.1:{dashboard_port}", report
        )
        report["versions_after"], report["audit_after"] = history(base)
        report["cache_entries_after"] = cache_entries(base)
        report["repeat_cache_hit"] = ask_cached(base)
    finally:
        Path(report_path).write_text(json.dumps(report, indent=1, default=str))
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            cluster.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    main(*sys.argv[1:4])
