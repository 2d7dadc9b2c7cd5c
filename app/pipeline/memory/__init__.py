"""Long-term memories (the `memory` decision plugin and /api/v1/storage/memories).

- store.py: the memory record, its scope, the store interface and the in-process store;
- redis_store.py: the same store in the management store's Redis (every replica sees it);
- extract.py: the rule-based extractor of durable facts from a user's turn;
- plugin.py: recall before routing, remembering after the answer (never in its way).
"""
