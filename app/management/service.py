"""`Management`: the state behind the management routes (store, activation, audit, auth,
startup, replays, outcomes, elo ratings, inventory, preview), one per process (per Ingress replica).

No HTTP here: the route modules (app/management/routes/) parse requests, call this state
and render its answers.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Unpack

from app.config.models import RouterConfig
from app.management.accuracy import ClassificationAccuracy
from app.management.activation import (
    ActivationController,
    Activator,
    ConfigSink,
    NoopActivator,
    Outcome,
    compile_pipeline,
)
from app.management.audit import AuditLog, AuditTrail
from app.management.auth import Authenticator
from app.management.cache_admin import ResponseCacheAdmin
from app.management.classification_metrics import MetricsSource
from app.management.documents import candidate_of, etag_of
from app.management.inventory import InventoryBackend, LocalInventory
from app.management.kb_map import MapCache
from app.management.knowledge_bases import KnowledgeBaseService, KnowledgeBaseStore
from app.management.live_inventory import RuntimeFactsProvider
from app.management.models import MutationResponse, StatusDocument
from app.management.rate_buckets import BucketBackend
from app.management.ratings import RatingStore
from app.management.replays import OutcomeLog, OutcomeStore, ReplaySource
from app.management.response_store import ResponseBackend
from app.management.shared_store import StoreUnavailable
from app.management.startup import StartupTracker, completed_tracker
from app.management.state import ConfigStore
from app.management.status import conditions
from app.management.storage import StorageService
from app.management.storage.client import StorageClient, storage_client
from app.observability.metrics import MetricsRecorder
from app.pipeline.memory.store import MemoryStore
from app.pipeline.signals.base import EmbedFn
from app.upstream.reachability import unreachable_backends

if TYPE_CHECKING:
    pass

log = logging.getLogger("svc_sr.management")

PREVIEW_DEADLINE_S = 30.0


class RoutingPreviewer(Protocol):
    """RouterPipeline.preview, or the Router deployment handle's `preview` adapted."""

    async def preview(
        self, request: Mapping[str, Any], headers: Mapping[str, str] | None = None, seed: int | None = None
    ) -> dict[str, Any]: ...


class ManagementParts(TypedDict, total=False):
    """Everything `Management` can be given besides the configuration; each has a default."""

    store: ConfigStore | None
    activator: Activator | None
    config_view: ConfigSink | None
    startup: StartupTracker | None
    audit: AuditTrail | None
    replays: ReplaySource | None
    outcomes: OutcomeLog | None
    ratings: RatingStore | None  # the elo ratings outcomes update (None: outcomes rate nothing)
    previewer: RoutingPreviewer | None
    inventory: InventoryBackend | None
    runtime_facts: RuntimeFactsProvider | None  # live deployment facts for the inventory (None: unknown)
    cache_admin: ResponseCacheAdmin | None  # None: the storage routes answer 503
    metrics: MetricsSource | None  # every replica's metrics summed (None: classification-metrics 503)
    recorder: MetricsRecorder | None  # this replica's metrics (outcomes set classification accuracy)
    response_store: ResponseBackend | None  # the shared Responses store (None: memory only)
    rate_buckets: BucketBackend | None  # the shared rate-limit buckets (None: memory only)
    # The knowledge bases (None: a service over kb_store, embedding with kb_embed)
    knowledge_bases: KnowledgeBaseService | None
    kb_store: KnowledgeBaseStore | None  # where they are kept (None: memory)
    kb_embed: EmbedFn | None  # the router's encoder (None: mutations answer 503)
    memory_store: MemoryStore | None  # the `memory` plugin's memories (None: the memory routes 503)
    # files and vector stores: this process's service, or a client of the Storage deployment
    # (None: their routes answer 503)
    storage: StorageService | StorageClient | None
    filename: str
    file_hash: str | None  # source hash of the configuration file as loaded now (None: `config` is it)
    environ: Mapping[str, str] | None
    activation_wait_s: float
    compile_check: Callable[[RouterConfig], None]
    preview_deadline_s: float
    # The router's encoder (texts -> unit vectors) for plugin probes (tool_selection); None:
    # create_app binds the diagnostics' one when it has classifiers, else probes answer 503.
    embed: EmbedFn | None


def now_stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Management:
    """State behind the management routes; build one per process (per Ingress replica)."""

    def __init__(self, config: RouterConfig, **parts: Unpack[ManagementParts]) -> None:
        self.instance_id = uuid.uuid4().hex
        self.store = parts.get("store") or ConfigStore()
        audit = parts.get("audit")
        self.audit: AuditTrail = audit if audit is not None else AuditLog()
        self._record_start(config, parts.get("filename", "config.yaml"), parts.get("file_hash"))
        self.startup = parts.get("startup") or completed_tracker()
        self.replays = parts.get("replays")
        outcomes = parts.get("outcomes")
        self.outcomes: OutcomeLog = outcomes if outcomes is not None else OutcomeStore()
        self.ratings = parts.get("ratings")
        self.previewer = parts.get("previewer")
        self.preview_deadline_s = parts.get("preview_deadline_s", PREVIEW_DEADLINE_S)
        self.embed = parts.get("embed")
        self.inventory = parts.get("inventory") or LocalInventory(
            self.startup, parts.get("runtime_facts"), lambda: self.config
        )
        self.cache_admin = parts.get("cache_admin")
        self.metrics = parts.get("metrics")
        self.accuracy = ClassificationAccuracy(parts.get("recorder"))
        # The data plane's stores kept where the management state is (Redis: shared).
        self.response_store = parts.get("response_store")
        self.rate_buckets = parts.get("rate_buckets")
        self.knowledge_bases = parts.get("knowledge_bases") or KnowledgeBaseService(
            parts.get("kb_store"), embed=parts.get("kb_embed")
        )
        self.kb_maps = MapCache()
        self.memory_store = parts.get("memory_store")
        self.storage = storage_client(parts.get("storage"))  # one code path for the routes
        activator = parts.get("activator")
        # Without an activator nothing can reach the routers: status reads `unknown` and
        # mutations answer 503 instead of persisting a change that would never serve.
        self.has_registry = activator is not None
        self.environ = parts.get("environ")
        self.authenticator = Authenticator.from_config(config, self.environ)
        callbacks: list[Callable[[RouterConfig], None]] = [self._refresh_auth]
        config_view = parts.get("config_view")
        if config_view is not None:
            callbacks.append(config_view.update)
        self.activation = ActivationController(
            self.store,
            self.audit,
            activator or NoopActivator(),
            config,
            on_active=callbacks,
            compile_check=parts.get("compile_check", compile_pipeline),
            wait_s=parts.get("activation_wait_s", 60.0),
        )

    def _record_start(self, config: RouterConfig, filename: str, file_hash: str | None) -> None:
        """Record what this replica serves at start (resumed, unchanged, or the file as a new
        version) in the store and the audit; a store that is down leaves a local copy."""
        serving = candidate_of(config)
        try:
            started = self.store.initialize(serving, filename=filename, file_hash=file_hash)
        except StoreUnavailable as exc:
            log.error("%s: serving the configuration without its history until the store is back", exc)
            self.store.seed_local(serving, filename)
            return
        log.info(
            "configuration at start: %s (version %s, config_version %d, store %s)",
            started.kind,
            started.version,
            started.config_version,
            started.store,
        )
        self.audit.record(
            "config.startup",
            config={**started.model_dump(), "instance_id": self.instance_id},
        )

    @property
    def config(self) -> RouterConfig:
        return self.activation.active_config

    def _refresh_auth(self, config: RouterConfig) -> None:
        self.authenticator = Authenticator.from_config(
            config, self.environ if self.environ is not None else os.environ
        )

    def hash_view(self) -> dict[str, Any]:
        view = self.activation.hash_view()
        if not self.has_registry:
            view["activation_status"] = "unknown"
        return view

    async def status_document(self) -> StatusDocument:
        down = await unreachable_backends(self.config)
        return StatusDocument(
            instance_id=self.instance_id,
            observed_at=now_stamp(),
            conditions=conditions(
                self.startup.status(),
                self.store.active is not None,
                self.hash_view(),
                self.store.reachable(),
                down,
            ),
        )

    def mutation_response(
        self, outcome: Outcome, rollback_of: str | None = None
    ) -> tuple[int, MutationResponse]:
        """(HTTP status, body) of a configuration change from its activation outcome."""
        attempt = outcome.attempt
        assert attempt is not None
        view = self.hash_view()
        status: Literal["active", "pending", "activation_failed", "superseded"]
        error = None
        if attempt.state == "active":
            code, status = 200, "active"
        elif attempt.state == "failed":
            code, status = 503, "activation_failed"
            reason = attempt.reasons[0] if attempt.reasons else None
            error = {
                "code": "ACTIVATION_FAILED",
                "message": (
                    f"activation failed at stage {reason.stage}: {reason.message}"
                    if reason
                    else "activation failed"
                ),
                "timestamp": now_stamp(),
            }
        else:  # superseded, pending
            code, status = 202, "superseded" if attempt.state == "superseded" else "pending"
        body = MutationResponse(
            status=status,
            source_config_hash=view["source_config_hash"],
            generated_runtime_hash=view["generated_runtime_hash"],
            active_runtime_hash=view["active_runtime_hash"],
            activation_status=view["activation_status"],
            config_version=view["config_version"],
            version=attempt.version,
            etag=etag_of(attempt.document_hash),
            activation=attempt.view(),
            warnings=outcome.warnings,
            rollback_of=rollback_of,
            error=error,
        )
        return code, body
