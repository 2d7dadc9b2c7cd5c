"""What the Ingress composes besides `Management`: one typed bundle per wing, and the wings'
stores opened where the management state lives.

`open_shared_stores` opens them at the location `app/management/stores.py` resolved for the
replica (settings, application name, state directory, one Redis pool): the Elo ratings and the
knowledge bases on Redis or in the state directory's files; on Redis also the outcomes, the
replay records, the Responses store, the rate-limit buckets, the memories and the keys' spend
(the replicas on every node share them). Without Redis those are each replica's own (memory) or
absent. The issued API keys live on Redis or in the state directory's file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.cache.admin import ResponseCacheAdmin
from app.common.redaction import redact_url
from app.exchange.responses.store import RedisResponseRecordStore, ResponseRecordStore
from app.keys.gate import KeyGate
from app.keys.records import KeyStore
from app.keys.spend import SpendStore
from app.keys.stores import open_key_stores
from app.observability.metrics import MetricsRecorder
from app.pipeline.learning.ratings import RatingStore, open_rating_store
from app.pipeline.memory.redis_store import RedisMemoryStore
from app.pipeline.memory.store import MemoryStore
from app.pipeline.signals.base import EmbedFn
from app.replays.classification_metrics import MetricsSource
from app.replays.parts import ReplayParts, replay_parts
from app.replays.replays import OutcomeLog, ReplaySource
from app.state.rate_buckets import BucketStore
from app.state.shared_store import ManagementStoreSettings
from app.storage.client import StorageClient
from app.storage.knowledge_bases import KnowledgeBaseStore, open_kb_store
from app.storage.parts import StorageParts, storage_parts

if TYPE_CHECKING:
    import redis


@dataclass
class DataPlaneStores:
    """The data plane's shared stores (None: each replica keeps its own in memory)."""

    responses: ResponseRecordStore | None = None  # the Responses API store
    rate_buckets: BucketStore | None = None  # the rate-limit buckets
    keys: KeyStore | None = None  # the issued API keys (None: this process's memory)
    spend: SpendStore | None = None  # spend per key and team (None: this process's memory)


@dataclass
class IngressParts:
    storage: StorageParts = field(default_factory=StorageParts)
    replays: ReplayParts = field(default_factory=ReplayParts)
    ratings: RatingStore | None = None  # the elo ratings outcomes update (None: outcomes rate nothing)
    cache_admin: ResponseCacheAdmin | None = None  # None: the response-cache routes answer 503
    data_plane: DataPlaneStores = field(default_factory=DataPlaneStores)
    # The data plane's API-key gate (create_app builds it over `data_plane`'s stores).
    keys: KeyGate | None = None
    # The router's encoder (texts -> unit vectors) for plugin probes (tool_selection); None:
    # create_app binds the diagnostics' one when it has classifiers, else probes answer 503.
    embed: EmbedFn | None = None


@dataclass
class SharedStores:
    """The wings' stores where the management state lives (module doc)."""

    ratings: RatingStore
    knowledge_bases: KnowledgeBaseStore
    outcomes: OutcomeLog | None = None
    replays: ReplaySource | None = None
    data_plane: DataPlaneStores = field(default_factory=DataPlaneStores)
    memories: MemoryStore | None = None  # the memory plugin's memories (app/pipeline/memory)


def open_shared_stores(
    settings: ManagementStoreSettings, name: str, state_dir: Path, client: redis.Redis | None
) -> SharedStores:
    """`client`: the replica's one Redis pool (None: a file store)."""
    # The Routers read the same ratings and bases (deployments/router.py opens them the same way).
    stores = SharedStores(
        open_rating_store(settings, name, state_dir, client), open_kb_store(settings, name, state_dir, client)
    )
    keys = open_key_stores(settings, name, state_dir, client)
    stores.data_plane.keys, stores.data_plane.spend = keys.keys, keys.spend
    if client is not None:
        from app.replays.replays_redis import RedisOutcomeStore, RedisReplayStore

        prefix = settings.prefix_for(name)
        stores.outcomes = RedisOutcomeStore(client, prefix)
        stores.replays = RedisReplayStore(client, prefix)
        assert settings.url is not None  # the settings' validator requires it
        where = redact_url(settings.url)
        stores.data_plane = DataPlaneStores(
            RedisResponseRecordStore(client, prefix, where), keys.buckets, keys.keys, keys.spend
        )
        stores.memories = RedisMemoryStore(client, prefix, where)
    return stores


def ingress_parts(  # noqa: PLR0913 - one part per wing the Ingress holds
    shared: SharedStores,
    *,
    storage: StorageClient | None,
    kb_embed: EmbedFn | None,
    replays: ReplaySource | None,
    metrics: MetricsSource | None,
    recorder: MetricsRecorder | None,
    cache_admin: ResponseCacheAdmin | None,
) -> IngressParts:
    """The Ingress replica's parts: the shared stores, and what it reaches over the graph
    (`replays`: the Observability deployment's ring, unless the records are on Redis)."""
    return IngressParts(
        storage=storage_parts(
            storage, kb_store=shared.knowledge_bases, kb_embed=kb_embed, memories=shared.memories
        ),
        replays=replay_parts(
            shared.replays if shared.replays is not None else replays, shared.outcomes, metrics, recorder
        ),
        ratings=shared.ratings,
        cache_admin=cache_admin,
        data_plane=shared.data_plane,
    )
