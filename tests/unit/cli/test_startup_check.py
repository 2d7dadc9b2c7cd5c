"""`svc-sr serve`'s end-to-end start check (app/cli/startup_check.py) against stand-in doors: real
HTTP servers on 127.0.0.1 that answer /ready and one chat request as told."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rich.console import Console

from app.cli import startup_check
from app.common.ports import free_port
from app.config.loader import parse_config


class Door:
    """A stand-in front door: /ready answers `ready`, the chat request `chat` (status, body)."""

    def __init__(self) -> None:
        self.ready: tuple[int, dict[str, Any]] = (200, {"phase": "complete"})
        self.chat: tuple[int, dict[str, Any]] = (200, {"choices": [{"message": {"content": "ready"}}]})
        self.requests: list[dict[str, Any]] = []
        door = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, answer: tuple[int, dict[str, Any]]) -> None:
                body = json.dumps(answer[1]).encode()
                self.send_response(answer[0])
                self.send_header("content-type", "application/json")
                self.send_header("x-vsr-selected-model", "small")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(door.ready)

            def do_POST(self) -> None:
                length = int(self.headers["content-length"])
                door.requests.append(
                    {"body": json.loads(self.rfile.read(length)), "headers": dict(self.headers)}
                )
                self._send(door.chat)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def doors() -> Iterator[tuple[Door, Door]]:
    pair = (Door(), Door())
    yield pair
    for door in pair:
        door.server.shutdown()


def config(backend_url: str) -> Any:
    return parse_config(
        {
            "version": "v0.3",
            "providers": {
                "defaults": {"default_model": "small"},
                "models": [{"name": "small", "backend_refs": [{"name": "llm", "base_url": backend_url}]}],
            },
        }
    ).config


def check(doors: tuple[Door, Door], backend_url: str) -> tuple[bool, str]:
    out = io.StringIO()
    console = Console(file=out, width=200)
    ok = startup_check.verify_serving(
        doors[0].url, doors[1].url, config(backend_url), console, ready_timeout=5
    )
    return ok, out.getvalue()


def test_ready_when_both_doors_answered_a_routed_request(doors: tuple[Door, Door]) -> None:
    ok, printed = check(doors, doors[0].url)  # something listens at the backend's address
    assert ok
    assert "Serve endpoint: answered by small" in printed and "Envoy + ext_proc: answered by small" in printed
    assert "WARNING" not in printed
    for door in doors:
        (request,) = door.requests
        assert request["body"]["model"] == "MoM"
        assert request["headers"]["x-vsr-cache-control"] == "bypass"  # never a cache hit or write


def test_a_backend_that_is_down_warns_loudly_but_the_router_starts(doors: tuple[Door, Door]) -> None:
    upstream_down = {"error": {"code": "upstream_unavailable", "message": "no backend answered"}}
    for door in doors:
        door.chat = (503, upstream_down)
    closed = free_port()
    ok, printed = check(doors, f"http://127.0.0.1:{closed}/v1")
    assert ok
    assert "WARNING: configured backends are unreachable" in printed
    assert f"small (llm at 127.0.0.1:{closed})" in printed
    assert "503 upstream_unavailable" in printed


@pytest.mark.slow
@pytest.mark.parametrize("answer", [(500, {"error": {"type": "server_error", "message": "boom"}}), None])
def test_a_door_that_cannot_answer_fails_the_start(doors: tuple[Door, Door], answer: Any) -> None:
    if answer is None:
        doors[1].server.shutdown()
        doors[1].server.server_close()  # Envoy's door: nothing listens
    else:
        doors[1].chat = answer
    ok, printed = check(doors, doors[0].url)
    assert not ok
    assert "Serve endpoint: answered by small" in printed
    assert "Envoy + ext_proc: " + ("500 server_error: boom" if answer else "no answer") in printed


@pytest.mark.slow
def test_a_model_that_failed_to_load_fails_the_start(doors: tuple[Door, Door]) -> None:
    doors[0].ready = (503, {"phase": "error", "reason": "Guard: weights missing"})
    ok, printed = check(doors, doors[0].url)
    assert not ok and doors[0].requests == []
    assert "the router is not ready: a model failed to load: Guard: weights missing" in printed


@pytest.mark.slow
def test_readiness_that_never_comes_fails_after_the_timeout(doors: tuple[Door, Door]) -> None:
    doors[0].ready = (503, {"phase": "loading_model_deployments", "pending_models": ["Guard"]})
    assert startup_check.wait_ready(doors[0].url, 1.0) == "not ready after 1 s (waiting for Guard)"
