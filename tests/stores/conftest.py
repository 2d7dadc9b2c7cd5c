"""Real shared stores for the response-cache backends: a local Redis with RediSearch, Milvus Lite.

Nothing is mocked. `redis_url` (tests/conftest.py) is one `valkey-server` with the RediSearch
module for the session; `milvus_uri` a fresh Milvus Lite location per test.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def milvus_uri(tmp_path: Path) -> str:
    """A fresh Milvus Lite location (a directory Milvus Lite creates; the suffix is its habit)."""
    return str(tmp_path / "response-cache.db")
