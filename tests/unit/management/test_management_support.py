"""Shared builders for the management API tests (no tests here).

The app is the real `create_app` over an in-process RouterPipeline, reached through
httpx's ASGI transport: no Ray, no network (unless a test starts a fake upstream).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from app.api.app import StaticConfigView, create_app
from app.api.parts import IngressParts
from app.config.document import RouterConfig
from app.config.loader import parse_config
from app.management import InProcessActivator, Management
from app.management.activation import Activator
from app.management.audit_redis import RedisAuditLog
from app.management.state import ConfigStore
from app.pipeline.learning.ratings import RATINGS_FILE, RATINGS_LOCK, RatingStore, open_rating_store
from app.pipeline.pipeline import RouterPipeline
from app.pipeline.services import PipelineServices
from app.replays.parts import replay_parts
from app.replays.replays import ReplayStore
from app.replays.replays_redis import RedisOutcomeStore
from app.state.shared_store import ManagementStoreSettings, redis_client
from app.state.state_stores import FileStateStore, RedisStateStore
from app.storage.parts import storage_parts
from app.upstream.client import UpstreamClient

SECRET = "sk-live-0123456789abcdef"

# Which store a Harness builds (tests/unit/conftest.py runs the management tests on each).
_redis_store: tuple[str, str] | None = None  # (url, key prefix)


def use_redis_store(url: str, prefix: str) -> None:
    global _redis_store
    _redis_store = (url, prefix)


def use_file_store() -> None:
    global _redis_store
    _redis_store = None


def shared_logs() -> dict[str, Any]:
    """On Redis also the audit chain and the outcomes live there (the replays a test passes)."""
    if _redis_store is None:
        return {}
    url, prefix = _redis_store
    client = redis_client(ManagementStoreSettings(backend="redis", url=url, key_prefix=prefix))
    return {"audit": RedisAuditLog(client, prefix), "outcomes": RedisOutcomeStore(client, prefix)}


def make_store(state_dir: Path | None) -> ConfigStore:
    """The file store over `state_dir` (memory when None), or Redis under this test's prefix."""
    if _redis_store is None:
        return ConfigStore(state_dir)
    url, prefix = _redis_store
    settings = ManagementStoreSettings(backend="redis", url=url, key_prefix=prefix)
    return ConfigStore(backend=RedisStateStore(redis_client(settings), prefix))


def make_ratings(state_dir: Path | None) -> RatingStore:
    """The elo ratings where the store under test keeps them: `state_dir`'s file (memory when
    None), or Redis under this test's prefix."""
    if _redis_store is None:
        return RatingStore(FileStateStore(state_dir, RATINGS_FILE, RATINGS_LOCK) if state_dir else None)
    url, prefix = _redis_store
    settings = ManagementStoreSettings(backend="redis", url=url, key_prefix=prefix)
    return open_rating_store(settings, "test", Path("unused"))


def base_document(base_url: str = "http://127.0.0.1:9/v1") -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "small"},
            "models": [
                {"name": "small", "backend_refs": [{"base_url": base_url}]},
                {
                    "name": "big",
                    "backend_refs": [
                        {
                            "base_url": base_url,
                            "api_key": SECRET,
                            "extra_headers": {"x-tenant": "tenant-secret-value"},
                        }
                    ],
                },
            ],
        },
        "routing": {
            "signals": {"keywords": [{"name": "math_kw", "keywords": ["integral", "derivative"]}]},
            "decisions": [
                {
                    "name": "math",
                    "rules": {"type": "keyword", "name": "math_kw"},
                    "modelRefs": [{"model": "big"}],
                }
            ],
        },
    }


def with_auth(document: dict[str, Any], auth: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(document)
    out.setdefault("global", {}).setdefault("services", {}).setdefault("management_api", {})["auth"] = auth
    return out


# The Harness keywords that name a wing's part beside Management (the Ingress's IngressParts).
WING_KEYS = frozenset(
    {
        "storage",
        "knowledge_bases",
        "memory_store",
        "outcomes",
        "metrics",
        "recorder",
        "ratings",
        "cache_admin",
        "embed",
    }
)


def ingress_parts(**wings: Any) -> IngressParts:
    """The Ingress's parts from the keywords the management tests name them by."""
    return IngressParts(
        storage=storage_parts(
            wings.get("storage"),
            knowledge_bases=wings.get("knowledge_bases"),
            memories=wings.get("memory_store"),
        ),
        replays=replay_parts(
            wings.get("replays"), wings.get("outcomes"), wings.get("metrics"), wings.get("recorder")
        ),
        ratings=wings.get("ratings"),
        cache_admin=wings.get("cache_admin"),
        embed=wings.get("embed"),
    )


class Harness:
    """create_app + Management (and the Ingress's parts beside it) over one in-process pipeline."""

    def __init__(
        self,
        document: dict[str, Any] | None = None,
        *,
        state_dir: Path | None = None,
        activator: Activator | None = None,
        environ: Mapping[str, str] | None = None,
        replays: ReplayStore | None = None,
        activation_wait_s: float = 30.0,
        services: PipelineServices | None = None,
        **management: Any,
    ) -> None:
        self.config: RouterConfig = parse_config(document or base_document()).config
        self.pipeline = RouterPipeline(self.config, services)
        self.view = StaticConfigView(self.config)
        self.replays = replays
        given = shared_logs() | management
        wings = {key: given.pop(key) for key in list(given) if key in WING_KEYS}
        self.parts = ingress_parts(**wings, replays=replays)
        self.management = Management(
            self.config,
            **given,
            store=make_store(state_dir),
            activator=activator or InProcessActivator(self.pipeline),
            config_view=self.view,
            previewer=self.pipeline,
            environ=environ or {},
            activation_wait_s=activation_wait_s,
        )
        self.app: FastAPI = create_app(
            self.pipeline, UpstreamClient(), self.view, management=self.management, parts=self.parts
        )

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://mgmt", headers=headers, timeout=30
        )


async def etag(client: httpx.AsyncClient) -> str:
    response = await client.get("/api/v1/config")
    assert response.status_code == 200, response.text
    return response.headers["etag"]


def error_code(response: httpx.Response) -> str:
    return response.json()["error"]["code"]
