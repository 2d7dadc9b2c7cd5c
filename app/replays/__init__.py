"""Replays and outcomes, beside app/observability: what the routers recorded and what clients
said about it.

- `replays`: replay records (`ReplayStore`, the memory ring; `ReplaySource`, what readers
  need), outcome submissions (`OutcomeStore`, `OutcomeLog`) and what an outcome scores;
- `replays_redis`: the same records and outcomes in the shared store's Redis;
- `replay_views`: trajectories, shadow datasets and judge tasks over the records;
- `classification_metrics`: the classification counters and timing summed over replicas;
- `accuracy`: svc_router_classification_accuracy from submitted outcomes.

No HTTP here: the routes are app/api's; the Observability deployment keeps the ring.
"""
