"""Management authentication: bearer tokens mapped to permissions (docs/management-api.md "Authentication").

`global.services.management_api.auth`:

    mode: bearer            # none (default) | bearer
    tokens:                 # optional; default: SVC_MGMT_TOKEN holds one admin token
      - name: ci
        token_env: SVC_MGMT_CI_TOKEN   # the token itself never appears in the document
        role: operator                 # viewer | operator | admin | a name from `roles`
      - name: auditor
        token_env: SVC_MGMT_AUDIT_TOKEN
        permissions: [audit.read, ready.read]
    roles:                  # optional extra roles: name -> permissions
      reader: [config.read, ready.read]

With mode bearer every route except GET /health needs `Authorization: Bearer <token>`
(401 without a valid one, 403 when the token lacks the route's permission). A token
whose environment variable is unset or empty is ignored, so bearer mode with no token
refuses everything (fail closed). Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.config.document import RouterConfig
from app.config.errors import issues_from_validation_error
from app.management.documents import Reason

log = logging.getLogger("svc_sr.management.auth")

DEFAULT_TOKEN_ENV = "SVC_MGMT_TOKEN"

# The contract names ready.read, secret_view, audit.read, data.read, config.read, classify.invoke,
# learning.ingest and cache roles; config.write, observability.read and inventory.read
# complete the set so every route has exactly one permission.
PERMISSIONS: dict[str, str] = {
    "ready.read": "replica status and startup detail",
    "config.read": "read configuration, schema, versions, hashes; validate and plan",
    "config.write": "PATCH/PUT configuration, rollback",
    "secret_view": "unredacted secrets and header values",
    "audit.read": "read the audit log",
    "data.read": "request content in replays and RAG previews; stored memories, files and vector-store search",
    "data.write": "delete stored memories; upload and delete files; create, change and delete vector stores",
    "classify.invoke": "run classifiers and routing previews",
    "learning.ingest": "submit outcomes",
    "observability.read": "replays and aggregates (content redacted without data.read)",
    "inventory.read": "model inventory and runtime deployments",
    "cache.read": "response cache statistics",
    "cache.invalidate": "invalidate response cache partitions",
    "cache.manage": "flush and reconfigure the response cache",
    "keys.read": "list the data plane's API keys and their spend (never a secret)",
    "keys.manage": "issue and revoke the data plane's API keys",
}

_VIEWER = {"ready.read", "config.read", "inventory.read", "cache.read"}
_OPERATOR = _VIEWER | {
    "config.write",
    "audit.read",
    "classify.invoke",
    "learning.ingest",
    "observability.read",
    "cache.invalidate",
    "keys.read",
}
BUILTIN_ROLES: dict[str, frozenset[str]] = {
    "viewer": frozenset(_VIEWER),
    "operator": frozenset(_OPERATOR),
    "admin": frozenset(PERMISSIONS),
}


class TokenSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    token_env: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    role: str | None = None
    permissions: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _grants_something(self) -> TokenSpec:
        if self.role is None and not self.permissions:
            raise ValueError("a token needs `role` or `permissions`")
        unknown = sorted(set(self.permissions) - set(PERMISSIONS))
        if unknown:
            raise ValueError(f"unknown permissions {unknown}; known: {sorted(PERMISSIONS)}")
        return self


class AuthSettings(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: Literal["none", "bearer"] = "none"
    tokens: list[TokenSpec] | None = None
    roles: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _roles_known(self) -> AuthSettings:
        for role, permissions in self.roles.items():
            unknown = sorted(set(permissions) - set(PERMISSIONS))
            if unknown:
                raise ValueError(f"role {role!r}: unknown permissions {unknown}")
        known = set(BUILTIN_ROLES) | set(self.roles)
        for token in self.tokens or []:
            if token.role is not None and token.role not in known:
                raise ValueError(f"token {token.name!r}: unknown role {token.role!r}; known: {sorted(known)}")
        return self


AUTH_PATH = "global.services.management_api.auth"


def auth_section(config: RouterConfig) -> dict[str, Any]:
    auth = config.global_.services.management_api.auth
    return auth.model_dump(mode="json", exclude_none=True)


def auth_issues(config: RouterConfig) -> list[Reason]:
    """Validate-stage reasons for a bad auth section (its keys beyond `mode` are free-form in RouterConfig)."""
    section = auth_section(config)
    try:
        AuthSettings.model_validate(section)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, document=section, prefix=AUTH_PATH, root=AuthSettings)
        return [Reason("validate", issue.code, issue.message, issue.path) for issue in issues]
    return []


@dataclass(frozen=True)
class Principal:
    name: str
    role: str | None
    permissions: frozenset[str]
    authenticated: bool = True

    def can(self, permission: str) -> bool:
        return permission in self.permissions


# Auth off: every route is open, but secrets stay redacted (a redacted document sent back
# keeps its secrets, see redaction.restore_redacted); turn bearer auth on to read them.
ANONYMOUS_ALL = Principal(
    name="anonymous", role=None, permissions=frozenset(PERMISSIONS) - {"secret_view"}, authenticated=False
)


class AuthError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Authenticator:
    """Resolved from one config version (tokens read from the environment at that moment)."""

    mode: str = "none"
    _tokens: list[tuple[bytes, Principal]] = field(default_factory=list)

    @classmethod
    def from_config(cls, config: RouterConfig, environ: Mapping[str, str] | None = None) -> Authenticator:
        env = os.environ if environ is None else environ
        try:
            settings = AuthSettings.model_validate(auth_section(config))
        except ValidationError:
            # validated before activation; a config loaded another way fails closed
            log.error("invalid %s: every management request will be refused", AUTH_PATH)
            return cls(mode="bearer")
        if settings.mode == "none":
            return cls(mode="none")
        roles = {**BUILTIN_ROLES, **{name: frozenset(perms) for name, perms in settings.roles.items()}}
        specs = settings.tokens
        if specs is None:
            specs = [TokenSpec(name="default", token_env=DEFAULT_TOKEN_ENV, role="admin")]
        tokens: list[tuple[bytes, Principal]] = []
        for spec in specs:
            secret = env.get(spec.token_env, "")
            if not secret:
                log.warning(
                    "management token %r: environment variable %s is unset; token ignored",
                    spec.name,
                    spec.token_env,
                )
                continue
            permissions = set(spec.permissions)
            if spec.role is not None:
                permissions |= roles.get(spec.role, frozenset())
            tokens.append((secret.encode("utf-8"), Principal(spec.name, spec.role, frozenset(permissions))))
        if not tokens:
            log.warning("management auth mode is bearer but no token is configured: every request is refused")
        return cls(mode="bearer", _tokens=tokens)

    @property
    def enabled(self) -> bool:
        return self.mode == "bearer"

    def authenticate(self, authorization: str | None) -> Principal:
        if not self.enabled:
            return ANONYMOUS_ALL
        if not authorization:
            raise AuthError(401, "UNAUTHORIZED", "missing Authorization: Bearer token")
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise AuthError(401, "UNAUTHORIZED", "the Authorization header must be `Bearer <token>`")
        presented = value.strip().encode("utf-8")
        match: Principal | None = None
        for secret, principal in self._tokens:
            # compare against every token so timing does not reveal which one nearly matched
            if hmac.compare_digest(secret, presented) and match is None:
                match = principal
        if match is None:
            raise AuthError(401, "UNAUTHORIZED", "invalid bearer token")
        return match

    def authorize(self, principal: Principal, permission: str | None) -> None:
        if permission is None or principal.can(permission):
            return
        raise AuthError(403, "FORBIDDEN", f"this token lacks the `{permission}` permission")
