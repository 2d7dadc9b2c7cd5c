"""A test upstream's server plumbing: an ASGI app served by uvicorn on 127.0.0.1 in a daemon
thread, usable as a context manager, with the recorded requests and the behaviour switches
(a dataclass) every fake has. The fakes (upstream.py, messages_upstream.py) subclass it and
describe their app and behaviour."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import fields
from typing import Any, Self

import uvicorn


class ServedApp:
    backlog = 512
    reuse_port = (
        False  # SO_REUSEPORT: share a port another process listens on (the kernel splits connections)
    )

    def __init__(self, name: str, prefix: str, port: int, behavior: Any) -> None:
        self.name = name
        self.behavior = behavior
        self._lock = threading.Lock()
        self.requests: list[Any] = []
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self._requested_port = port
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app: Any = None  # set by the subclass

    def configure(self, **changes: Any) -> None:
        unknown = set(changes) - {f.name for f in fields(self.behavior)}
        if unknown:
            raise TypeError(f"unknown {type(self).__name__} behaviour: {', '.join(sorted(unknown))}")
        for key, value in changes.items():
            setattr(self.behavior, key, value)

    @property
    def request_count(self) -> int:
        return len(self.requests)

    @property
    def last_request(self) -> Any:
        return self.requests[-1] if self.requests else None

    @property
    def port(self) -> int:
        if self._sock is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._sock.getsockname()[1]

    @property
    def host_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.host_url + self.prefix

    def start(self) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if self.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", self._requested_port))
        sock.listen(self.backlog)
        self._sock = sock
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"{type(self).__name__}-{self.name}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} {self.name} failed to start")
            time.sleep(0.01)
        return self

    def _before_stop(self) -> None:
        """Let held requests go before the server exits (subclasses)."""

    def stop(self) -> None:
        self._before_stop()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
