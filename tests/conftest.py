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
    _cli_stacks_first(items)


def _uses_session_stack(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get("stack") if info is not None else None
    return bool(defs) and defs[-1].scope == "session"


def _cli_stacks_first(items: list[pytest.Item]) -> None:
    """Run the modules marked `cli_stack` (`svc-sr serve` under the CLI, its own Ray) before
    tests/integration's session-scoped `stack` starts.

    That stack (three applications, some forty Ray processes) stays up from its first use to the
    end of the session and, idle, keeps 0.64 of the 2 cores busy (its Ray processes' CPU ticks
    over 60 s); those modules used to run beside it. Only these move: moving every module that
    does not use the stack put test_model_deployments' local-testing-mode Ray before the
    multi-node scenario, and that Ray's GCS died under it (pytest, its driver, exited 60 s later
    with no summary; not diagnosed). Everything else keeps its order, and a module moves whole."""
    starts = next((i for i, item in enumerate(items) if _uses_session_stack(item)), len(items))
    early = {item.path for item in items[:starts]}
    early |= {item.path for item in items if item.get_closest_marker("cli_stack") is not None}
    items.sort(key=lambda item: item.path not in early)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """redis://127.0.0.1:PORT of a Redis-compatible server with the search module."""
    with redis_with_search(tmp_path_factory.mktemp("valkey")) as url:
        yield url
