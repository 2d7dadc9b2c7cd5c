"""Where a process finds the issued keys and their spend: the management store's location
(app/state/shared_store.py), for the Ingress (app/api/parts.py) and the ext_proc sidecar alike.
Keys: Redis or the state directory's file. Spend and the keys' rate buckets: Redis, else this
process's memory (each process then limits on its own)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.common.redaction import redact_url
from app.keys.records import KeyStore, open_key_store
from app.keys.spend import RedisSpend, SpendStore
from app.state.rate_buckets import BucketStore, RedisBuckets
from app.state.shared_store import ManagementStoreSettings

if TYPE_CHECKING:
    import redis


@dataclass
class KeyStores:
    keys: KeyStore
    spend: SpendStore | None = None  # None: this process's memory
    buckets: BucketStore | None = None  # None: this process's memory


def open_key_stores(
    settings: ManagementStoreSettings, name: str, state_dir: Path, client: redis.Redis | None
) -> KeyStores:
    """`client`: the process's one Redis pool (None: a file store)."""
    stores = KeyStores(open_key_store(settings, name, state_dir, client))
    if client is not None:
        assert settings.url is not None  # the settings' validator requires it
        prefix, where = settings.prefix_for(name), redact_url(settings.url)
        stores.spend = RedisSpend(client, prefix, where)
        stores.buckets = RedisBuckets(client, prefix, where)
    return stores
