"""Fixtures every test folder may use.

`redis_url` starts one real Redis-compatible server with the search module for the whole
session (tests/fakes/stores.py says how; SVC_SR_TEST_REDIS_URL names a server of your own
instead): the response-cache contract suite (tests/stores), the management store on Redis
(tests/unit) and the graph over shared stores (tests/integration) use it. Tests sharing it
keep apart by key prefix. The store packages are in the `dev` extra: a missing one fails
the tests, it never skips them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# pytest-xdist's workers inherit COLUMNS=80; rich reads it once, when a CLI module's Console is
# created at import, so tables printed through CliRunner(env={"COLUMNS": ...}) stayed 80 wide.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

from tests.fakes.stores import redis_with_search

# The folders whose tests start Ray, the CLI's stacks or workers (scripts/run-tests.sh runs them
# one at a time): they carry `integration`, so `-m "not integration"` is the in-process set.
_INTEGRATION_FOLDERS = ("integration", "cluster", "srun", "envoy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        if "tests" in parts and parts[parts.index("tests") + 1] in _INTEGRATION_FOLDERS:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """redis://127.0.0.1:PORT of a Redis-compatible server with the search module."""
    with redis_with_search(tmp_path_factory.mktemp("valkey")) as url:
        yield url
