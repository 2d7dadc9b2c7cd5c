"""How Serve replaces replicas when a deployment's version changes (a `serve deploy` with new
application arguments, a management activation whose arguments changed, new code).

Serve's default stops an old replica before it starts its replacement. A deployment with one
replica (the Router, the classifiers, the Embedding, most of the graph on a small cluster) then
has none for as long as the new one takes to load its models: 40 to 70 s on 2 busy cores, and
every request waiting on it in an Ingress times out (3 of 711 in the `serve deploy` test). With
a surge the replacement starts first and the old replica stops once it serves, so there is
always one. A replacement that finds no room waits while the old replica keeps serving.

LLMServer keeps Serve's default: a second engine on a full GPU would wait forever. So does a
deployment whose one replica owns a store (`single_replica`: the Storage deployment, the
ResponseCache over memory or Milvus Lite): its replacement must not open the records file or
a Milvus Lite directory while the old replica still holds it (the second opener finds it
locked), so the old one stops first.

A stopping replica drains its in-flight requests (up to `graceful_shutdown_timeout_s`), checking
every `graceful_shutdown_wait_loop_s`, and waits one period even when idle. A graph stops in
dependency order (the Ingress, then the Router, then the models: deployments/shutdown.py), so
Serve's 2 s period made `svc-sr stop` and every roll-out wait ~3 s per level: 12 s for an idle
graph. The check is a counter read, so polling every 0.05 s costs nothing and drains the same
requests: an idle level stops in ~0.06 s.
"""

from __future__ import annotations

import logging
from typing import Any

# Extra replicas allowed during a roll-out, as a percentage of the target count (rounded up).
SURGE_PERCENT = 100

# How often a stopping replica checks whether its in-flight requests have finished (Serve: 2 s).
SHUTDOWN_POLL_S = 0.05


def single_replica(options: dict[str, Any], name: str, why: str) -> dict[str, Any]:
    """Serve `options` for a deployment whose one replica owns its store, whatever the Serve
    config asks (a larger count or autoscaling is warned about and dropped): one replica, and
    no surge, so a roll-out stops the old owner before its replacement opens the store. The
    Storage deployment (records file, ingestion worker, a Milvus Lite file) and the
    ResponseCache over a store one process must own (app/cache/factory.py `single_owner`).
    Autoscaling up to one replica (one machine's on-demand start, deployments/serve_env.py) is
    kept: still never two owners."""
    if (options.get("autoscaling_config") or {}).get("max_replicas") == 1:
        kept = {k: v for k, v in options.items() if k != "num_replicas"}
        return kept | {"max_surge_percent": 0}
    if options.get("num_replicas", 1) != 1 or "autoscaling_config" in options:
        logging.getLogger("svc_sr.graph").warning("%s: %s; running one replica", name, why)
    kept = {k: v for k, v in options.items() if k != "autoscaling_config"}
    return kept | {"num_replicas": 1, "max_surge_percent": 0}
