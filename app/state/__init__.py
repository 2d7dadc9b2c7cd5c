"""Shared state: where replicas keep what they share, and how they write it safely.

- `shared_store`: where the state lives (`ManagementStoreSettings`: a state directory, or Redis
  shared by every replica on every node) and `StoreUnavailable`, what a store that is down or
  too slow raises (callers degrade, never fail a request);
- `state_stores`: one revisioned document saved by compare-and-set (memory, file, Redis);
- `json_document`: a typed JSON document over those backends.

Management's configuration store, the audit chain and every wing's shared store (replays and
outcomes, Elo ratings, knowledge bases, Responses, rate buckets) build on these.
"""
