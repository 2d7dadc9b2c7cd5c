"""Open the management state an Ingress replica works on, and decide what a start serves.

`open_config_store`: the configuration store (documents, versions, activation record) on
the file (`<state_dir>/state.json`) or on Redis (ManagementStoreSettings). `start_document`:
the graph builder's choice before anything is deployed: the stored active version when the
configuration file did not change since it was last loaded, else the file
(resolve_startup_document). The Ingress then records the same outcome in the store
and the audit (Management, `config.startup`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.common.redaction import redact_url
from app.config.loader import load_config, parse_config
from app.management.audit import AuditTrail
from app.management.documents import CheckedDocument, candidate_of, merge_patch
from app.management.state import ConfigStore, StartupKind, open_store, state_dir_of
from app.state.shared_store import (
    ManagementStoreSettings,
    StoreUnavailable,
    redis_client,
    store_settings,
)
from app.state.state_stores import RedisStateStore, StoreCorrupt

if TYPE_CHECKING:
    import redis

    from app.management.service import ManagementParts

log = logging.getLogger("svc_sr.management.stores")


class GraphStoreArgs(Protocol):
    """The GraphArgs fields (deployments/graph.py) that say where the management state is."""

    config_path: str
    config: dict[str, Any] | None
    config_overrides: dict[str, Any]
    state_dir: str | None
    management_store: ManagementStoreSettings | None
    app_name: str | None


@dataclass
class ReplicaStores:
    """What one Ingress replica's Management works on, and where: the wings' stores are opened
    at the same place with the same Redis pool (app/api/parts.py open_shared_stores). On Redis
    also the audit chain (None: this replica's own)."""

    store: ConfigStore
    file_hash: str  # the configuration file as it reads now (resume or not)
    filename: str
    settings: ManagementStoreSettings
    name: str  # the application the state is named after
    state_dir: Path
    client: redis.Redis | None = None  # the one Redis pool (None: a file store)
    audit: AuditTrail | None = None

    def parts(self) -> ManagementParts:
        parts: ManagementParts = {"store": self.store, "file_hash": self.file_hash, "filename": self.filename}
        if self.audit is not None:
            parts["audit"] = self.audit
        return parts


def open_replica_stores(args: GraphStoreArgs, serve_app: str) -> ReplicaStores:
    """The state is named after GraphArgs.app_name when given (the builder consulted that
    name to resume), else after the Serve application."""
    name = args.app_name or serve_app
    if name != serve_app:
        log.warning("GraphArgs.app_name %r differs from the Serve application %r", name, serve_app)
    settings = store_settings(args.management_store)
    state_dir = state_dir_of(args.state_dir, name)
    client = redis_client(settings) if settings.backend == "redis" else None  # one pool for all
    try:
        store = open_config_store(settings, name, state_dir, client)
    except OSError as exc:  # an unwritable state directory must not keep the router down
        log.error("management state directory %s unusable (%s); keeping versions in memory", state_dir, exc)
        store = ConfigStore()
    filename = "inline" if args.config is not None else Path(args.config_path).name
    stores = ReplicaStores(
        store, file_candidate(args).source_hash, filename, settings, name, state_dir, client
    )
    if client is not None:
        from app.management.audit_redis import RedisAuditLog

        stores.audit = RedisAuditLog(client, settings.prefix_for(name))
    return stores


def open_config_store(
    settings: ManagementStoreSettings, app_name: str, state_dir: Path, client: redis.Redis | None = None
) -> ConfigStore:
    """The configuration store: Redis (shared by every replica; `client`: one the caller
    already holds) or `state_dir`'s file."""
    if settings.backend == "redis":
        assert settings.url is not None  # the settings' validator requires it
        backend = RedisStateStore(
            client or redis_client(settings), settings.prefix_for(app_name), where=redact_url(settings.url)
        )
        return ConfigStore(backend=backend)
    return open_store(state_dir)


def file_candidate(args: GraphStoreArgs) -> CheckedDocument:
    """The configuration file (or the inline document) as it reads now, with the deployment's
    `config_overrides` merged over it (a JSON merge patch: where this cluster's stores are)."""
    if args.config is not None:
        loaded = parse_config(args.config, source="GraphArgs.config")
    else:
        loaded = load_config(Path(args.config_path))
    if args.config_overrides:
        document = merge_patch(loaded.config.to_document(), args.config_overrides)
        loaded = parse_config(document, source=f"{loaded.source} + GraphArgs.config_overrides")
    return candidate_of(loaded.config)


def start_document(
    file: CheckedDocument, settings: ManagementStoreSettings, app_name: str, state_dir: str | None
) -> tuple[dict[str, Any], StartupKind]:
    """The document a start deploys, and why (first, unchanged, resumed or file)."""
    store = open_config_store(settings, app_name, state_dir_of(state_dir, app_name))
    document, kind = resolve_startup_document(store, file)
    if kind == "resumed":
        log.warning(
            "resuming the stored active configuration of %r from %s: the configuration file did not "
            "change since it was last loaded (edit the file to make it win)",
            app_name,
            store.backend.describe(),
        )
    return document, kind


def resolve_startup_document(store: ConfigStore, file: CheckedDocument) -> tuple[dict[str, Any], StartupKind]:
    """What a start serves: the stored active document when the configuration file did not
    change since it was last loaded (a change made through the API survives a restart),
    else the file. A store that cannot be read leaves the file (and says so in the log)."""
    try:
        state = store._load()
    except (StoreUnavailable, StoreCorrupt) as exc:
        log.warning("%s: starting from the configuration file", exc)
        return file.document, "file"
    if state is None or state.active is None:
        return file.document, "first"
    active = state.active
    if state.file_hash == file.source_hash and active.source_hash != file.source_hash:
        return copy.deepcopy(active.document), "resumed"
    return file.document, "unchanged" if active.source_hash == file.source_hash else "file"
