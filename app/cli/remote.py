"""HTTP client of the management API for the CLI, and the exit codes scripts rely on.

The bearer token is read from an environment variable (`--token-env`, default
SVC_MGMT_TOKEN), never from a command-line argument, and never printed.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, cast

import click
import httpx

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 15.0
DEFAULT_TOKEN_ENV = "SVC_MGMT_TOKEN"

# Exit codes (also documented in docs/management-api.md):
EXIT_OK = 0
EXIT_FAILURE = 1  # unexpected answer or local failure
EXIT_INVALID = 2  # bad usage, invalid configuration or request (400)
EXIT_UNREACHABLE = 3  # nothing answers at the endpoint
EXIT_CONFLICT = 4  # 409 RESTART_REQUIRED, 412 stale If-Match, 428 missing If-Match
EXIT_ACTIVATION_FAILED = 5  # 503 activation_failed: persisted, previous generation serves
EXIT_PENDING = 6  # 202: persisted, activation still pending (or superseded)
EXIT_AUTH = 7  # 401/403
EXIT_NOT_FOUND = 8  # 404 (unknown version, replay, route)


def status_exit_code(status: int) -> int:
    if status < 300:
        return EXIT_PENDING if status == 202 else EXIT_OK
    if status in (401, 403):
        return EXIT_AUTH
    if status in (409, 412, 428):
        return EXIT_CONFLICT
    if status == 404:
        return EXIT_NOT_FOUND
    if status == 503:
        return EXIT_ACTIVATION_FAILED
    if 400 <= status < 500:
        return EXIT_INVALID
    return EXIT_FAILURE


def fail(message: str, code: int) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


class MgmtClient:
    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        timeout: float = DEFAULT_TIMEOUT,
        token_env: str = DEFAULT_TOKEN_ENV,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"user-agent": "svc-sr-cli/0.1"}
        token = os.environ.get(token_env, "")
        if token:
            headers["authorization"] = f"Bearer {token}"
        self.endpoint = endpoint.rstrip("/")
        self._client = httpx.Client(
            base_url=self.endpoint, timeout=timeout, headers=headers, transport=transport
        )

    def __enter__(self) -> MgmtClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **kwargs)
        except httpx.TimeoutException:
            fail(f"{method} {self.endpoint}{path}: timed out", EXIT_FAILURE)
        except httpx.TransportError as exc:
            fail(f"cannot reach {self.endpoint}: {type(exc).__name__}", EXIT_UNREACHABLE)

    def etag(self) -> str:
        response = self.request("GET", "/api/v1/config")
        check(response)
        return response.headers["etag"]


def error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return f"HTTP {response.status_code}"
    lines = [f"HTTP {response.status_code} {error.get('code')}: {error.get('message')}"]
    for reason in (error.get("details") or {}).get("reasons", []):
        where = reason.get("path") or "(document)"
        lines.append(f"  - [{reason.get('stage')}] {where}: {reason.get('message')} ({reason.get('code')})")
    return "\n".join(lines)


def check(response: httpx.Response) -> None:
    """Exit with the status's code unless the answer is a success."""
    if response.status_code >= 300:
        fail(error_text(response), status_exit_code(response.status_code))


def read_document(path: Path) -> dict[str, Any]:
    """A local file (or - for stdin) as a mapping; exit 2 when it does not parse."""
    from app.config.errors import ConfigError
    from app.config.loader import parse_text

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", EXIT_INVALID)
    except UnicodeDecodeError:
        fail(f"{path} is not UTF-8 text", EXIT_INVALID)
    try:
        return parse_text(text, source=str(path))
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)


def print_reasons(reasons: list[dict[str, Any]]) -> None:
    for reason in reasons:
        where = reason.get("path") or "(document)"
        click.echo(
            f"  - [{reason.get('stage')}] {where}: {reason.get('message')} ({reason.get('code')})", err=True
        )


MUTATION_FIELDS = ("status", "config_version", "version", "etag", "source_config_hash", "activation_status")


def report_mutation(response: httpx.Response) -> NoReturn:
    """Print a configuration mutation's answer and exit with its code: 0 active, 6 pending,
    5 activation failed (persisted, the previous configuration serves), else the error's."""
    code = status_exit_code(response.status_code)
    if response.status_code in (200, 202, 503):
        body = response.json()
        echo_json({k: body.get(k) for k in MUTATION_FIELDS})
        for warning in body.get("warnings", []):
            click.echo(f"warning: {warning}", err=True)
        if response.status_code == 503:
            click.echo(
                "activation failed (the document is persisted; the previous configuration serves):", err=True
            )
            print_reasons((body.get("activation") or {}).get("reasons", []))
        sys.exit(code)
    fail(error_text(response), code if code != EXIT_OK else EXIT_FAILURE)


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


@dataclass(frozen=True)
class Remote:
    """Where a remote command talks to: --endpoint (None: not given), --timeout, --token-env."""

    endpoint: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    token_env: str = DEFAULT_TOKEN_ENV

    def client(self) -> MgmtClient:
        return MgmtClient(self.endpoint or DEFAULT_ENDPOINT, self.timeout, self.token_env)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request's JSON answer; a failure exits with its status's code (`check`)."""
        with self.client() as client:
            response = client.request(method, path, **kwargs)
        check(response)
        return response.json()


def option_group(
    target: str, build: Callable[..., Any], *options: Callable[[Any], Any]
) -> Callable[..., Any]:
    """A decorator adding click `options` whose values reach the command as one argument,
    `target=build(**their values)` (a settings object instead of a long parameter list)."""
    names = [param.name for option in options for param in option(lambda: None).__click_params__]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            grouped = {name: kwargs.pop(name) for name in names}
            return func(*args, **{target: build(**grouped)}, **kwargs)

        wrapped: Any = command
        for option in reversed(options):
            wrapped = option(wrapped)
        return cast(Callable[..., Any], wrapped)

    return decorate


remote_options = option_group(
    "remote",
    Remote,
    click.option(
        "--endpoint",
        envvar="SVC_MGMT_ENDPOINT",
        default=None,
        help=f"Management API base URL (env SVC_MGMT_ENDPOINT; default {DEFAULT_ENDPOINT}).",
    ),
    click.option(
        "--timeout", default=DEFAULT_TIMEOUT, show_default=True, type=float, help="Seconds per HTTP request."
    ),
    click.option(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        show_default=True,
        help="Environment variable holding the management bearer token.",
    ),
)
"""--endpoint, --timeout, --token-env (the remote forms of `svc-sr config`,
docs/management-api.md) as `remote: Remote`."""
