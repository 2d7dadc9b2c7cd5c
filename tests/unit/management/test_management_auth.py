"""Management auth: off by default, bearer tokens with permissions and roles, redaction
by secret_view, tokens never in logs, auth turned on by a config change."""

from __future__ import annotations

import logging

import pytest

from app.common.redaction import REDACTED
from tests.unit.management.test_management_support import (
    SECRET,
    Harness,
    base_document,
    error_code,
    etag,
    with_auth,
)

ADMIN, VIEWER, OPERATOR, AUDITOR = (
    "admin-tok-1111",
    "viewer-tok-2222",
    "operator-tok-3333",
    "auditor-tok-4444",
)
ENV = {"SVC_MGMT_TOKEN": ADMIN, "T_VIEW": VIEWER, "T_OP": OPERATOR, "T_AUDIT": AUDITOR}
TOKENS = {
    "mode": "bearer",
    "tokens": [
        {"name": "root", "token_env": "SVC_MGMT_TOKEN", "role": "admin"},
        {"name": "dash", "token_env": "T_VIEW", "role": "viewer"},
        {"name": "ci", "token_env": "T_OP", "role": "operator"},
        {"name": "auditor", "token_env": "T_AUDIT", "permissions": ["audit.read"]},
        {"name": "ghost", "token_env": "T_UNSET", "role": "admin"},
    ],
}


def bearer(tokens: dict | None = None) -> Harness:
    return Harness(with_auth(base_document(), tokens or TOKENS), environ=ENV)


@pytest.mark.slow
async def test_auth_off_everything_open_but_secrets_redacted():
    h = Harness()
    async with h.client() as c:
        config = await c.get("/api/v1/config")
        discovery = (await c.get("/api/v1")).json()
    assert (
        config.status_code == 200
        and config.json()["providers"]["models"][1]["backend_refs"][0]["api_key"] == REDACTED
    )
    assert discovery["auth_mode"] == "none"


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/config",
        "/ready",
        "/api/v1",
        "/openapi.json",
        "/docs",
        "/api/v1/observability/audit",
        "/api/v1/inventory/models",
        "/startup-status",
    ],
)
@pytest.mark.slow
async def test_bearer_requires_a_token_everywhere_but_health(path: str):
    h = bearer()
    async with h.client() as anonymous, h.client("wrong-token") as wrong, h.client(ADMIN) as admin:
        assert (await anonymous.get("/health")).status_code == 200
        missing = await anonymous.get(path)
        bad = await wrong.get(path)
        ok = await admin.get(path)
        query = await anonymous.get(path, params={"access_token": ADMIN})  # tokens are never read from URLs
    assert missing.status_code == 401 and error_code(missing) == "UNAUTHORIZED"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert bad.status_code == 401 and query.status_code == 401
    assert ok.status_code == 200


@pytest.mark.slow
async def test_data_plane_model_list_stays_public_and_diagnostics_need_classify_invoke():
    h = bearer()
    async with h.client() as anonymous, h.client(VIEWER) as viewer:
        models = await anonymous.get("/v1/models")
        diag = await viewer.post("/api/v1/diagnostics/classify/intent", json={"text": "x"})
        typed = await viewer.post(
            "/api/v1/diagnostics/models/labels",
            json={"recipe": "default", "binding": "domain_classifier", "text": "x"},
        )
        similarity = await viewer.post("/api/v1/diagnostics/similarity", json={"text1": "a", "text2": "b"})
    assert models.status_code == 200
    for denied in (diag, typed, similarity):
        assert denied.status_code == 403 and error_code(denied) == "FORBIDDEN"


@pytest.mark.slow
async def test_roles_and_permissions():
    h = bearer()
    async with (
        h.client(VIEWER) as viewer,
        h.client(OPERATOR) as operator,
        h.client(AUDITOR) as auditor,
        h.client(ADMIN) as admin,
    ):
        tag = await etag(viewer)
        denied = await viewer.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
        allowed = await operator.patch(
            "/api/v1/config", json={"routing": {"strategy": "confidence"}}, headers={"If-Match": tag}
        )
        audit_by_viewer = await viewer.get("/api/v1/observability/audit")
        audit_by_auditor = await auditor.get("/api/v1/observability/audit")
        config_by_auditor = await auditor.get("/api/v1/config")
        operator_view = (await operator.get("/api/v1/config")).json()
        admin_view = (await admin.get("/api/v1/config")).json()
    assert denied.status_code == 403 and "config.write" in denied.json()["error"]["message"]
    assert allowed.status_code == 200
    assert audit_by_viewer.status_code == 403 and config_by_auditor.status_code == 403
    entries = audit_by_auditor.json()["entries"]
    assert any(e["action"] == "auth.denied" and e["status"] == 403 for e in entries)
    patch = next(e for e in entries if e["action"] == "config.patch")
    assert (patch["principal"], patch["role"]) == ("ci", "operator")
    assert operator_view["providers"]["models"][1]["backend_refs"][0]["api_key"] == REDACTED
    assert admin_view["providers"]["models"][1]["backend_refs"][0]["api_key"] == SECRET


@pytest.mark.slow
async def test_default_token_env_is_admin_and_unset_tokens_fail_closed():
    h = Harness(with_auth(base_document(), {"mode": "bearer"}), environ={"SVC_MGMT_TOKEN": ADMIN})
    closed = Harness(with_auth(base_document(), {"mode": "bearer"}), environ={})
    async with h.client(ADMIN) as admin, closed.client(ADMIN) as other, closed.client() as anonymous:
        assert (await admin.get("/api/v1/config")).status_code == 200
        assert (await other.get("/api/v1/config")).status_code == 401
        assert (await anonymous.get("/health")).status_code == 200


@pytest.mark.slow
async def test_tokens_never_reach_the_logs(caplog: pytest.LogCaptureFixture):
    h = bearer()
    caplog.set_level(logging.DEBUG)
    async with h.client(ADMIN) as admin, h.client("not-a-token-9999") as wrong:
        await admin.get("/api/v1/config")
        await wrong.get("/api/v1/config")
        await admin.patch(
            "/api/v1/config",
            json={"routing": {"strategy": "confidence"}},
            headers={"If-Match": await etag(admin)},
        )
    text = caplog.text + str([e.model_dump() for e in h.management.audit.query(limit=1000).entries])
    for secret in (ADMIN, "not-a-token-9999", SECRET):
        assert secret not in text


@pytest.mark.slow
async def test_enabling_bearer_by_patch_takes_effect_after_activation():
    h = Harness(environ={"SVC_MGMT_TOKEN": ADMIN})
    async with h.client() as anonymous, h.client(ADMIN) as admin:
        r = await anonymous.patch(
            "/api/v1/config",
            json={"global": {"services": {"management_api": {"auth": {"mode": "bearer"}}}}},
            headers={"If-Match": await etag(anonymous)},
        )
        assert r.status_code == 200, r.text
        assert (await anonymous.get("/api/v1/config")).status_code == 401
        assert (await admin.get("/api/v1")).json()["auth_mode"] == "bearer"


@pytest.mark.slow
async def test_bad_auth_section_is_rejected_with_its_path():
    h = Harness()
    async with h.client() as c:
        r = await c.patch(
            "/api/v1/config",
            json={
                "global": {
                    "services": {
                        "management_api": {
                            "auth": {
                                "mode": "bearer",
                                "tokens": [{"name": "x", "token_env": "X", "role": "superuser"}],
                            }
                        }
                    }
                }
            },
            headers={"If-Match": await etag(c)},
        )
        v = await c.post(
            "/api/v1/config/validate",
            json=with_auth(
                base_document(),
                {"mode": "bearer", "tokens": [{"name": "x", "token_env": "X", "permissions": ["root"]}]},
            ),
        )
    assert r.status_code == 400
    assert r.json()["error"]["details"]["reasons"][0]["path"].startswith(
        "global.services.management_api.auth"
    )
    assert v.json()["valid"] is False


@pytest.mark.slow
async def test_discovery_reports_the_enforced_permission_of_each_route():
    h = bearer()
    async with h.client(ADMIN) as admin:
        routes = (await admin.get("/api/v1")).json()["routes"]
    by_key = {(r["method"], r["path"]): r for r in routes}
    assert (
        by_key[("GET", "/health")]["permission"] is None and not by_key[("GET", "/health")]["authenticated"]
    )
    assert by_key[("PATCH", "/api/v1/config")]["permission"] == "config.write"
    assert by_key[("GET", "/api/v1/observability/audit")]["permission"] == "audit.read"
    assert by_key[("POST", "/api/v1/diagnostics/classify/intent")]["permission"] == "classify.invoke"
    for path in ("/models/tokens", "/models/rerank", "/embeddings", "/similarity/batch"):
        assert by_key[("POST", f"/api/v1/diagnostics{path}")]["permission"] == "classify.invoke"
    assert by_key[("GET", "/api/v1/diagnostics/models")]["sensitivity"] == "sensitive"
    assert by_key[("POST", "/api/v1/observability/outcomes")]["permission"] == "learning.ingest"
    assert by_key[("GET", "/api/v1/status")]["permission"] == "ready.read"
    assert not by_key[("POST", "/v1/chat/completions")]["authenticated"]
