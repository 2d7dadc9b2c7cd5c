"""Real shared stores for the response-cache backends: a local Redis with RediSearch, Milvus Lite.

Nothing is mocked. `redis_url` starts one `valkey-server` with the RediSearch module for the
session (tests/fakes/stores.py says how; SVC_SR_TEST_REDIS_URL names a server of your own
instead). The store packages are in the `dev` extra: a missing one fails the tests (they are
never skipped).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.stores import redis_with_search


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """redis://127.0.0.1:PORT of a Redis-compatible server with the search module."""
    with redis_with_search(tmp_path_factory.mktemp("valkey")) as url:
        yield url


@pytest.fixture
def milvus_uri(tmp_path: Path) -> str:
    """A fresh Milvus Lite location (a directory Milvus Lite creates; the suffix is its habit)."""
    return str(tmp_path / "response-cache.db")
