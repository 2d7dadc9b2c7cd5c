"""The response cache's flush epochs in Milvus: a small collection next to the entries.

`<collection>_epochs` holds one row per flushed scope: `id` (GLOBAL_EPOCH or a scope key,
app/cache/base.py), `epoch` (INT64) and a 2-d placeholder vector (Milvus wants a vector field
in every collection). It is created with Strong consistency, so a read after another
replica's flush sees it. Kept by clear(), so every replica and a restart share it.

Approximate, and why: advancing is read-then-upsert (Milvus has no increment), so two
replicas flushing the same scope at the same instant may advance it once; it still advances,
which is all a token comparison needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from app.cache.base import GLOBAL_EPOCH, CacheEpochs, CacheScope, scopes_of

T = TypeVar("T")
Call = Callable[..., Any]  # MilvusSemanticCache._call: one client call under its timeout

EPOCHS_SUFFIX = "_epochs"
SCOPE_KEY_MAX = 1024  # VARCHAR bytes of a scope key (model and decision names)
_WINDOW = 16_384


class MilvusEpochs:
    """Read and advance the epochs of one cache collection through `call`."""

    def __init__(self, call: Call, collection: str) -> None:
        self._call = call
        self.collection = collection + EPOCHS_SUFFIX
        self._lock = threading.Lock()  # one advance at a time in this process

    def ensure(self, client: Any) -> None:
        """Create (or load) the epochs collection."""
        if self._call(client.has_collection, self.collection):
            self._call(client.load_collection, self.collection)
            return
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=SCOPE_KEY_MAX)
        schema.add_field("epoch", DataType.INT64)
        schema.add_field("placeholder", DataType.FLOAT_VECTOR, dim=2)
        index = client.prepare_index_params()
        index.add_index(field_name="placeholder", index_type="FLAT", metric_type="L2")
        self._call(client.create_collection, self.collection, schema=schema, consistency_level="Strong")
        self._call(client.create_index, self.collection, index, sync=False)
        self._call(client.load_collection, self.collection)

    def read(self, client: Any) -> CacheEpochs:
        rows = self._call(
            client.query, self.collection, filter='id != ""', output_fields=["id", "epoch"], limit=_WINDOW
        )
        counters = {row["id"]: int(row["epoch"]) for row in rows}
        return CacheEpochs(global_epoch=counters.pop(GLOBAL_EPOCH, 0), scopes=counters)

    def token(self, client: Any, partition: str) -> int:
        model, decision = scopes_of(partition)
        keys = [GLOBAL_EPOCH, model.key, decision.key]
        rows = self._call(client.get, self.collection, ids=keys, output_fields=["epoch"])
        return sum(int(row["epoch"]) for row in rows)

    def advance(self, client: Any, scope: CacheScope | None) -> int:
        key = GLOBAL_EPOCH if scope is None else scope.key
        with self._lock:
            rows = self._call(client.get, self.collection, ids=[key], output_fields=["epoch"])
            epoch = (int(rows[0]["epoch"]) if rows else 0) + 1
            self._call(
                client.upsert, self.collection, [{"id": key, "epoch": epoch, "placeholder": [0.0, 0.0]}]
            )
        return epoch
