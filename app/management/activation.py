"""Configuration activation: the contract's state machine (docs/management-api.md) from a
persisted candidate to the serving generation.

    mutation --(ETag ok, parse + validate ok)--> persisted, attempt `pending`
    pending --(compile, warm, activate ok)--> `active`: next config_version, hashes converge
    pending --(failure at compile|warm|activate)--> `failed`: previous generation keeps serving,
                                                       the document stays persisted, 503 activation_failed
    pending|failed --(newer candidate persisted)--> `superseded`

Documents failing `parse`/`validate` are rejected before anything is persisted (400
INVALID_CONFIG, audit config.reject, `last_rejection`). Activations run one at a time in
persist order; a candidate still waiting when a newer one is persisted is skipped.

The replicas are reached through an `Activator` (in-process pipeline here; rollout.py's
GraphActivator redeploys the Serve graph and waits for every Router replica); it raises
ActivationFailed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from app.common.background import BackgroundTasks
from app.common.redaction import scrub, secret_values
from app.config.document import RouterConfig
from app.management.audit import AuditTrail
from app.management.auth import auth_issues
from app.management.documents import (
    CheckedDocument,
    DocumentRejected,
    Reason,
    Stage,
    etag_of,
    restart_required,
)
from app.management.state import ConfigStore, StaleDocument, VersionRecord, VersionResult
from app.state.shared_store import StoreUnavailable

log = logging.getLogger("svc_sr.management.activation")

AttemptState = Literal["pending", "active", "failed", "superseded"]
DEFAULT_WAIT_S = 60.0


class ActivationFailed(Exception):
    """Raised by an Activator: the candidate cannot serve; the previous generation stays."""

    def __init__(self, stage: Stage, code: str, path: str | None = None, message: str = "") -> None:
        super().__init__(message or code)
        self.stage = stage
        self.code = code
        self.path = path
        self.message = message or code


class Activator(Protocol):
    async def activate(self, config: RouterConfig, document: dict[str, Any]) -> None: ...


class ConfigSink(Protocol):
    def update(self, config: RouterConfig) -> None: ...


class UpdatablePipeline(Protocol):
    async def update_config(self, config: RouterConfig) -> None: ...


class InProcessActivator:
    """Activates on an in-process RouterPipeline (stage `warm`: build + warm aside, then swap)."""

    def __init__(self, pipeline: UpdatablePipeline) -> None:
        self.pipeline = pipeline

    async def activate(self, config: RouterConfig, document: dict[str, Any]) -> None:
        try:
            await self.pipeline.update_config(config)
        except ActivationFailed:
            raise
        except Exception as exc:
            raise ActivationFailed("warm", "warm_failed", None, f"{type(exc).__name__}: {exc}") from exc


class NoopActivator:
    """For API servers with nothing to reload beyond the config view."""

    async def activate(self, config: RouterConfig, document: dict[str, Any]) -> None:
        return None


def compile_pipeline(config: RouterConfig) -> None:
    """Stage `compile`: build the routing pipeline once, without services and without warming."""
    from app.pipeline.pipeline import RouterPipeline

    RouterPipeline(config)


class PreconditionFailed(Exception):
    """428 (no If-Match) or 412 (stale If-Match)."""

    def __init__(self, status: int, code: str, message: str, current_etag: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.current_etag = current_etag


def has_if_match(if_match: str | None) -> bool:
    return if_match is not None and bool(if_match.strip())


def if_match_required(current_etag: str) -> PreconditionFailed:
    return PreconditionFailed(
        428, "PRECONDITION_REQUIRED", "If-Match with the current ETag is required", current_etag
    )


class RestartRequired(Exception):
    def __init__(self, reasons: list[Reason]) -> None:
        super().__init__("; ".join(r.message for r in reasons))
        self.reasons = reasons


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class Attempt:
    attempt: int
    version: str
    document_hash: str
    runtime_hash: str
    source: str
    state: AttemptState = "pending"
    stage: Stage | None = None
    started_at: str = field(default_factory=_now)
    finished_at: str | None = None
    reasons: list[Reason] = field(default_factory=list)
    config_version: int | None = None
    request_id: str | None = None
    role: str | None = None
    running: bool = False  # reached the replicas: it finishes, a newer candidate follows it
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "version": self.version,
            "document_hash": self.document_hash,
            "state": self.state,
            "stage": self.stage,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "reasons": [r.as_dict() for r in self.reasons],
        }


@dataclass
class Outcome:
    """What a mutation answers: the attempt (None for a rejection) and the registry view."""

    attempt: Attempt | None
    warnings: list[str] = field(default_factory=list)


class ActivationController:
    def __init__(
        self,
        store: ConfigStore,
        audit: AuditTrail,
        activator: Activator,
        initial: RouterConfig,
        on_active: list[Callable[[RouterConfig], None]] | None = None,
        compile_check: Callable[[RouterConfig], None] = compile_pipeline,
        wait_s: float = DEFAULT_WAIT_S,
    ) -> None:
        self.store = store
        self.audit = audit
        self.activator = activator
        self.active_config = initial
        self.on_active = list(on_active or [])
        self.compile_check = compile_check
        self.wait_s = wait_s
        self.current: Attempt | None = None
        self.last_rejection: dict[str, Any] | None = None
        self._mutation_lock = asyncio.Lock()
        self._activation_lock = asyncio.Lock()
        self._tasks = BackgroundTasks()

    # ------------------------------------------------------------------ views
    @property
    def etag(self) -> str:
        return etag_of(self.store.source_hash)

    @property
    def activation_status(self) -> str:
        if self.current is None or self.current.state == "active":
            return "active"
        if self.current.state == "superseded":
            return "pending"
        return self.current.state

    def hash_view(self) -> dict[str, Any]:
        active = self.store.active
        return {
            "source_config_hash": self.store.source_hash,
            "generated_runtime_hash": self.store.runtime_hash,
            "active_runtime_hash": active.runtime_hash if active else None,
            "activation_status": self.activation_status,
            "config_version": active.config_version if active else None,
            "active_version": active.version if active else None,
            "activation": self.current.view() if self.current else None,
            "last_rejection": self.last_rejection,
        }

    # ------------------------------------------------------------------ mutation
    async def mutate(
        self,
        if_match: str | None,
        build: Callable[[dict[str, Any]], CheckedDocument],
        source: str,
        *,
        request_id: str | None = None,
        role: str | None = None,
        rollback_of: str | None = None,
    ) -> Outcome:
        """Check If-Match, build the candidate from the persisted document, persist, activate.

        Raises PreconditionFailed, DocumentRejected (nothing persisted), RestartRequired."""
        async with self._mutation_lock:
            current_hash = self.store.source_hash  # the store's latest (another replica may have written)
            current_etag = etag_of(current_hash)
            if not has_if_match(if_match):
                raise if_match_required(current_etag)
            assert if_match is not None
            if not _etag_matches(if_match, current_etag):
                raise PreconditionFailed(
                    412,
                    "CONFIG_CHANGED",
                    "the configuration changed since it was read (stale If-Match)",
                    current_etag,
                )
            try:
                candidate = build(self.store.document)
                issues = auth_issues(candidate.config)
                if issues:
                    raise DocumentRejected(issues)
            except DocumentRejected as exc:
                self._reject(
                    exc.reasons, source, request_id, role, secrets=secret_values(self.store.document)
                )
                raise
            restart = restart_required(self.active_config, candidate.config)
            if restart:
                self._reject(restart, source, request_id, role, secrets=secret_values(candidate.document))
                raise RestartRequired(restart)
            try:
                attempt = self._persist(candidate, source, request_id, role, rollback_of, current_hash)
            except StaleDocument as exc:  # another replica persisted after the If-Match check
                raise PreconditionFailed(
                    412,
                    "CONFIG_CHANGED",
                    "the configuration changed since it was read (stale If-Match)",
                    etag_of(exc.current_hash),
                ) from None
        self._tasks.spawn(self._activate(attempt, candidate))
        with contextlib.suppress(TimeoutError):  # still pending: answered 202, the activation goes on
            await asyncio.wait_for(asyncio.shield(attempt.done.wait()), self.wait_s)
        return Outcome(attempt=attempt, warnings=candidate.warnings)

    def _persist(
        self,
        candidate: CheckedDocument,
        source: str,
        request_id: str | None,
        role: str | None,
        rollback_of: str | None,
        expected_hash: str,
    ) -> Attempt:
        record: VersionRecord = self.store.persist(
            candidate, source, rollback_of=rollback_of, request_id=request_id, expected_hash=expected_hash
        )
        previous = self.current
        if previous is not None and (
            previous.state == "failed" or (previous.state == "pending" and not previous.running)
        ):
            self._supersede(previous, by=record.attempt)
        attempt = Attempt(
            attempt=record.attempt,
            version=record.version,
            document_hash=record.hash,
            runtime_hash=record.runtime_hash,
            source=source,
            request_id=request_id,
            role=role,
        )
        self.current = attempt
        return attempt

    def _supersede(self, attempt: Attempt, by: int) -> None:
        was = attempt.state
        attempt.state = "superseded"
        attempt.finished_at = attempt.finished_at or _now()
        self._record_result(attempt.version, "superseded")
        self.audit.record(
            "config.supersede",
            request_id=attempt.request_id,
            role=attempt.role,
            config={
                "attempt": attempt.attempt,
                "result": "superseded",
                "previous_state": was,
                "superseded_by": by,
                "source": attempt.source,
                "version": attempt.version,
                "document_hash": attempt.document_hash,
            },
        )
        if was == "pending":
            attempt.done.set()

    def _reject(
        self, reasons: list[Reason], source: str, request_id: str | None, role: str | None, secrets: set[str]
    ) -> None:
        redacted = [Reason(r.stage, r.code, scrub(r.message, secrets), r.path) for r in reasons]
        reasons[:] = redacted
        stage = redacted[0].stage if redacted else "validate"
        self.last_rejection = {
            "timestamp": _now(),
            "source": source,
            "stage": stage,
            "reasons": [r.as_dict() for r in redacted],
            "persisted": False,
        }
        self.audit.record(
            "config.reject",
            request_id=request_id,
            role=role,
            config={
                "attempt": None,
                "result": "rejected",
                "source": source,
                "stage": stage,
                "reason_codes": sorted({r.code for r in redacted}),
                "persisted": False,
            },
        )

    # ------------------------------------------------------------------ activation
    async def _activate(self, attempt: Attempt, candidate: CheckedDocument) -> None:
        async with self._activation_lock:
            if attempt.state != "pending":  # superseded while waiting for the previous activation
                return
            attempt.running = True
            secrets = secret_values(candidate.document)
            try:
                attempt.stage = "compile"
                try:
                    self.compile_check(candidate.config)
                except Exception as exc:
                    raise ActivationFailed(
                        "compile", "compile_failed", None, f"{type(exc).__name__}: {exc}"
                    ) from exc
                attempt.stage = "activate"
                await self.activator.activate(candidate.config, candidate.config.to_document())
            except ActivationFailed as exc:
                self._fail(attempt, Reason(exc.stage, exc.code, scrub(exc.message, secrets), exc.path))
                return
            except Exception as exc:  # an activator bug must not leave the attempt pending forever
                log.exception("activation attempt %d failed unexpectedly", attempt.attempt)
                self._fail(
                    attempt,
                    Reason("activate", "activation_error", scrub(f"{type(exc).__name__}: {exc}", secrets)),
                )
                return
            self._succeed(attempt, candidate)

    def _succeed(self, attempt: Attempt, candidate: CheckedDocument) -> None:
        try:
            attempt.config_version = self.store.mark_active(attempt.version)
        except KeyError:  # pushed out of a tiny history; the generation serves regardless
            attempt.config_version = None
        except StoreUnavailable as exc:  # the replicas serve it; the record waits for the store
            log.error("activation of %s not recorded: %s", attempt.version, exc)
            attempt.config_version = None
        attempt.state = "active"
        attempt.finished_at = _now()
        self._serve(candidate.config)
        self.audit.record(
            "config.activate",
            request_id=attempt.request_id,
            role=attempt.role,
            config={
                "attempt": attempt.attempt,
                "result": "active",
                "source": attempt.source,
                "version": attempt.version,
                "config_version": attempt.config_version,
                "document_hash": attempt.document_hash,
            },
        )
        attempt.done.set()

    def _fail(self, attempt: Attempt, reason: Reason) -> None:
        attempt.state = "failed"
        attempt.stage = reason.stage
        attempt.reasons = [reason]
        attempt.finished_at = _now()
        self._record_result(attempt.version, "failed")
        self.last_rejection = {
            "timestamp": attempt.finished_at,
            "source": attempt.source,
            "stage": reason.stage,
            "attempt": attempt.attempt,
            "version": attempt.version,
            "reasons": [reason.as_dict()],
            "persisted": True,
        }
        self.audit.record(
            "config.reject",
            request_id=attempt.request_id,
            role=attempt.role,
            config={
                "attempt": attempt.attempt,
                "result": "failed",
                "source": attempt.source,
                "version": attempt.version,
                "document_hash": attempt.document_hash,
                "stage": reason.stage,
                "reason_codes": [reason.code],
                "persisted": True,
            },
        )
        attempt.done.set()

    def _record_result(self, version: str, result: VersionResult) -> None:
        try:
            self.store.mark_result(version, result)
        except StoreUnavailable as exc:  # the outcome still answers; only its history entry lags
            log.error("result %s of %s not recorded: %s", result, version, exc)

    def adopt(self, config: RouterConfig) -> None:
        """Another replica activated `config` (it arrived through reconfigure): serve it here too."""
        if config.to_document() != self.active_config.to_document():
            self._serve(config)

    def _serve(self, config: RouterConfig) -> None:
        """`config` is what this replica serves now: the config view, auth and the rest follow."""
        self.active_config = config
        for callback in self.on_active:
            try:
                callback(config)
            except Exception:
                log.exception("on_active callback failed")

    async def drain(self) -> None:
        """Wait for every activation started so far (tests, shutdown)."""
        await self._tasks.drain()


def _etag_matches(header: str, current: str) -> bool:
    """If-Match may list several tags; weak tags never match (strong comparison). `*` is not
    accepted: the point of If-Match here is to name the document the change was made against."""
    return any(tag.strip() == current for tag in header.split(","))
