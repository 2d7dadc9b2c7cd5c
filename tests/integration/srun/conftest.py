"""The router-side svc-srun tests run Serve deployments in local testing mode (no cluster), but
a deployment's background work there (a handle call, a metrics push) can auto-initialize a Ray
driver in this process. Left running, it would make the session's real Ray instance
(tests/integration/conftest.py `stack`) refuse to start ("ray.init twice"): shut it down
after each module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def no_stray_ray_driver() -> Iterator[None]:
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()
