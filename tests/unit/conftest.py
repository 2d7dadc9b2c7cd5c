"""The management tests run once per management store: every test module that builds its
app through `Harness` (tests/unit/management/test_management_support.py) runs on the file store and
again on Redis (a real server, tests/conftest.py `redis_url`), each test on its own keys.
A test that is about the file itself carries `@pytest.mark.file_store`.

`minilm_embed`: the router's real encoder as an EmbedFn (vectors computed off the event loop),
for the signal families that read the request's sentence vector."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from app.pipeline.signals.base import EmbedFn
from app.runtime.encoder import shared_encoder
from tests.unit.management import test_management_support as support


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (
        "management_store" in metafunc.fixturenames
        and metafunc.module.__name__.rsplit(".", 1)[-1].startswith(("test_management_", "test_cli_"))
        and hasattr(metafunc.module, "Harness")
        and metafunc.definition.get_closest_marker("file_store") is None
    ):
        metafunc.parametrize("management_store", ["file", "redis"], indirect=True)


@pytest.fixture(autouse=True)
def management_store(request: pytest.FixtureRequest) -> Iterator[str]:
    kind: str = getattr(request, "param", "file")
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        support.use_redis_store(url, f"svc_sr:test:{uuid.uuid4().hex}:")
    try:
        yield kind
    finally:
        support.use_file_store()


@pytest.fixture(scope="session")
def minilm_embed() -> EmbedFn:
    encoder = shared_encoder()
    encoder.warm_up()

    async def embed(texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(encoder.encode, list(texts))

    return embed
