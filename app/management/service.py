"""`Management`: the state behind the management routes (store, activation, audit, auth,
startup, inventory, routing preview), one per process (per Ingress replica).

No HTTP here: the route modules (app/management/routes/) parse requests, call this state
and render its answers. The wings (storage, replays and outcomes, Elo learning, the response
cache, the data plane's stores) are not part of it: the Ingress composes them beside it
(app/api/parts.py).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypedDict, Unpack

from app.config.document import RouterConfig
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
from app.management.documents import candidate_of, etag_of
from app.management.inventory import InventorySource, LocalInventory
from app.management.live_inventory import RuntimeFactsProvider
from app.management.schemas import MutationResponse, StatusDocument
from app.management.startup import StartupTracker, completed_tracker
from app.management.state import ConfigStore
from app.management.status import conditions
from app.state.shared_store import StoreUnavailable
from app.upstream.reachability import unreachable_backends

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
    previewer: RoutingPreviewer | None
    inventory: InventorySource | None
    runtime_facts: RuntimeFactsProvider | None  # live deployment facts for the inventory (None: unknown)
    filename: str
    file_hash: str | None  # source hash of the configuration file as loaded now (None: `config` is it)
    environ: Mapping[str, str] | None
    activation_wait_s: float
    compile_check: Callable[[RouterConfig], None]
    preview_deadline_s: float


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
        self.previewer = parts.get("previewer")
        self.preview_deadline_s = parts.get("preview_deadline_s", PREVIEW_DEADLINE_S)
        self.inventory = parts.get("inventory") or LocalInventory(
            self.startup, parts.get("runtime_facts"), lambda: self.config
        )
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
