"""Configuration documents as the management API handles them.

A submitted document goes through the checks that need no replica (stages `parse` and
`validate`, `compile` runs later in activation.py); what is persisted is its compact
canonical v0.3 form (legacy layouts converted, defaults left out), so GET returns what
the author chose and the ETag is the hash of exactly the bytes a PUT of that body gives.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from app.config.document import RouterConfig
from app.config.errors import ConfigError
from app.config.loader import LoadedConfig, config_hash, parse_config, parse_text
from app.srun.bound_models import check_bound_models

Stage = Literal["parse", "compile", "validate", "warm", "activate"]


@dataclass
class Reason:
    """One rejection reason: stage, stable code, optional document path, redacted message."""

    stage: Stage
    code: str
    message: str
    path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stage": self.stage, "code": self.code, "message": self.message}
        if self.path:
            out["path"] = self.path
        return out


class DocumentRejected(Exception):
    """The document failed `parse` or `validate`: nothing is persisted."""

    def __init__(self, reasons: list[Reason]) -> None:
        super().__init__("; ".join(f"{r.path or '(document)'}: {r.message}" for r in reasons))
        self.reasons = reasons


@dataclass
class CheckedDocument:
    """A checked document: `document` is the compact canonical form that gets persisted."""

    config: RouterConfig
    document: dict[str, Any]
    source_hash: str
    runtime_hash: str
    warnings: list[str] = field(default_factory=list)


def canonical_bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def document_hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(document)).hexdigest()


def compact_document(config: RouterConfig) -> dict[str, Any]:
    document: dict[str, Any] = {"version": config.version}
    document.update(config.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True, mode="json"))
    return document


def etag_of(source_hash: str) -> str:
    return f'"{source_hash}"'


def parse_body(raw: bytes | str, content_type: str | None = None) -> dict[str, Any]:
    """Request body (JSON or YAML text) -> mapping; DocumentRejected at stage `parse`."""
    try:
        text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
        return parse_text(text, source="request body")
    except UnicodeDecodeError:
        raise DocumentRejected([Reason("parse", "not_utf8", "the body is not UTF-8 text")]) from None
    except ConfigError as exc:
        raise DocumentRejected(reasons_from_config_error(exc)) from None


def reasons_from_config_error(exc: ConfigError) -> list[Reason]:
    return [
        Reason(stage=issue.stage, code=issue.code, message=issue.message, path=issue.path or None)
        for issue in exc.issues
    ]


def check_document(document: dict[str, Any]) -> CheckedDocument:
    """Stages parse (shape) and validate (schema + cross references, and the models of the user's
    own that bindings name, read from their directories)."""
    try:
        loaded: LoadedConfig = parse_config(document, source="request body")
    except ConfigError as exc:
        raise DocumentRejected(reasons_from_config_error(exc)) from None
    try:
        check_bound_models(loaded.config)
    except ConfigError as exc:
        raise DocumentRejected(reasons_from_config_error(exc)) from None
    compact = compact_document(loaded.config)
    return CheckedDocument(
        config=loaded.config,
        document=compact,
        source_hash=document_hash(compact),
        runtime_hash=config_hash(loaded.config),
        warnings=list(loaded.warnings),
    )


def candidate_of(config: RouterConfig) -> CheckedDocument:
    """A config already loaded elsewhere (the file the process started with) as a CheckedDocument."""
    compact = compact_document(config)
    return CheckedDocument(
        config=config, document=compact, source_hash=document_hash(compact), runtime_hash=config_hash(config)
    )


def diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """Changes from `before` to `after` as add/remove/replace operations on dotted paths."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[dict[str, Any]] = []
        for key in sorted(set(before) | set(after), key=str):
            child = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append({"op": "remove", "path": child, "before": before[key]})
            elif key not in before:
                out.append({"op": "add", "path": child, "after": after[key]})
            else:
                out.extend(diff(before[key], after[key], child))
        return out
    if before == after:
        return []
    return [{"op": "replace", "path": path or "(document)", "before": before, "after": after}]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: mappings merge, `null` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def restart_required(old: RouterConfig, new: RouterConfig) -> list[Reason]:
    """Settings a live reload cannot apply (RESTART_REQUIRED, docs/management-api.md): the listener set or a
    listener's address/port/timeout/api_key_required/models (the ext_proc sidecar reads them at start), and the
    tracing settings."""
    reasons: list[Reason] = []
    before = {listener.name: listener for listener in old.listeners}
    after = {listener.name: listener for listener in new.listeners}
    if set(before) != set(after):
        added = sorted(set(after) - set(before))
        removed = sorted(set(before) - set(after))
        reasons.append(
            Reason(
                "validate",
                "restart_required",
                f"the listener set changes (added {added}, removed {removed})",
                "listeners",
            )
        )
    for index, listener in enumerate(new.listeners):
        prior = before.get(listener.name)
        if prior is None:
            continue
        for attr in ("address", "port", "timeout", "api_key_required", "models"):
            if getattr(prior, attr) != getattr(listener, attr):
                reasons.append(
                    Reason(
                        "validate",
                        "restart_required",
                        f"listener {listener.name!r} changes its {attr}",
                        f"listeners[{index}].{attr}",
                    )
                )
    if old.global_.services.observability.tracing != new.global_.services.observability.tracing:
        reasons.append(
            Reason(
                "validate",
                "restart_required",
                "tracing settings change",
                "global.services.observability.tracing",
            )
        )
    return reasons
