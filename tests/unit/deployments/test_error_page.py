"""HAProxy's own error page (deployments/error_page.py): a whole HTTP response in the spec's
error shape, that HAProxy itself accepts, written where Serve 2.60 keeps its page."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from deployments.error_page import PAGE_NAME, error_page, install_error_pages


def test_the_page_is_a_503_with_the_data_planes_error_body() -> None:
    head, body = error_page().split(b"\r\n\r\n", 1)
    status, *fields = head.decode().split("\r\n")
    headers = {name.lower(): value for name, value in (f.split(": ", 1) for f in fields)}
    assert status == "HTTP/1.1 503 Service Unavailable"
    assert headers["content-type"] == "application/json" and headers["retry-after"] == "1"
    assert int(headers["content-length"]) == len(body)
    error = json.loads(body)["error"]
    assert error["type"] == "service_unavailable_error" and "retry" in error["message"]


def test_pages_are_replaced_on_this_node_only_with_haproxy(tmp_path: Path) -> None:
    node = tmp_path / "node-id"
    node.mkdir()
    (node / PAGE_NAME).write_text("HTTP/1.1 500 Internal Server Error\r\n\r\nInternal Server Error")
    env = {"RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(tmp_path / "haproxy.cfg")}
    assert install_error_pages(env) == []  # Serve's Python proxy: nothing to do
    env["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
    assert install_error_pages(env) == [node / PAGE_NAME]
    assert (node / PAGE_NAME).read_bytes() == error_page()
    assert install_error_pages(env) == []  # already in place: not rewritten


def test_serve_writes_its_page_where_the_ingress_looks_for_it(tmp_path: Path) -> None:
    """Private Serve layout the page relies on: `<dir of the config file>/500.http`, the config
    file itself one directory per node under RAY_SERVE_HAPROXY_CONFIG_FILE_LOC's."""
    from ray.serve._private.haproxy import HAProxyApi, HAProxyConfig

    node = tmp_path / "node-id"
    config = HAProxyConfig(
        socket_path=str(node / "admin.sock"),
        server_state_base=str(node),
        server_state_file=str(node / "state"),
    )
    api = HAProxyApi(cfg=config, config_file_path=str(node / "haproxy.cfg"))
    assert api.cfg.error_file_path == str(node / PAGE_NAME)
    env = {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(tmp_path / "haproxy.cfg"),
    }
    assert install_error_pages(env) == [node / PAGE_NAME]


def haproxy_check(tmp_path: Path, page_bytes: bytes) -> subprocess.CompletedProcess[str]:
    """`haproxy -c` of a configuration that answers 502, 503 and 504 with the page."""
    from ray.serve._private.haproxy import get_haproxy_binary

    page = tmp_path / PAGE_NAME
    page.write_bytes(page_bytes)
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        "defaults\n    mode http\n"
        + "".join(f"    errorfile {status} {page}\n" for status in (502, 503, 504))
        + "frontend f\n    bind 127.0.0.1:18999\n    default_backend b\nbackend b\n"
    )
    return subprocess.run([get_haproxy_binary(), "-c", "-f", str(config)], capture_output=True, text=True)


def test_haproxy_accepts_the_page_as_an_errorfile(tmp_path: Path) -> None:
    checked = haproxy_check(tmp_path, error_page())
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_haproxy_check_catches_a_broken_page(tmp_path: Path) -> None:
    """The check above can fail: a page without its head's end is refused."""
    checked = haproxy_check(tmp_path, b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n{}")
    assert checked.returncode != 0 and PAGE_NAME in checked.stdout + checked.stderr
