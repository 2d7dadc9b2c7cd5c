"""Where a benchmark command's configuration comes from: a config file (`--config`), a
registered target (`--target`, app/benchmark/registry.py), or a running router's management
API (`--url`: its active document). Shared by run, replay, plan, preview and candidate-plan.
"""

from __future__ import annotations

from pathlib import Path

import click

from app.benchmark.registry import Registry, Target
from app.benchmark.store import StoreError
from app.cli.benchmark_report_cmds import current_store
from app.cli.remote import (
    DEFAULT_ENDPOINT,
    DEFAULT_TIMEOUT,
    DEFAULT_TOKEN_ENV,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    MgmtClient,
    check,
    fail,
)
from app.config.document import RouterConfig

URL_KEY = "svc_sr.benchmark.url"


def target(name: str, kind: str) -> Target:
    try:
        found = Registry(current_store()).target(name)
    except StoreError as exc:
        fail(str(exc), EXIT_INVALID)
    if found.kind != kind:
        fail(f"target {name!r} is a {found.kind} target; this command takes a {kind} target", EXIT_INVALID)
    return found


def config_file(config_path: Path | None, target_name: str | None) -> tuple[RouterConfig, str]:
    """The config of --config FILE or of a config target; its label (the absolute path)."""
    from app.config.errors import ConfigError
    from app.config.loader import load_config

    if (config_path is None) == (target_name is None):
        raise click.UsageError("give --config FILE or --target NAME (a config target), one of them")
    path = config_path if config_path is not None else Path(target(str(target_name), "config").config or "")
    try:
        return load_config(path).config, str(path.resolve())
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)


def router_client(url: str | None, target_name: str | None, timeout: float, token_env: str) -> MgmtClient:
    """The management API of --url, of a router target, else of the group's --url, else local."""
    if url is not None and target_name is not None:
        raise click.UsageError("give --url or --target, not both")
    if target_name is not None:
        found = target(target_name, "router")
        return MgmtClient(found.url or DEFAULT_ENDPOINT, timeout, found.token_env or token_env)
    endpoint = url or click.get_current_context().find_root().meta.get(URL_KEY) or DEFAULT_ENDPOINT
    return MgmtClient(endpoint, timeout, token_env)


def fetch_config(client: MgmtClient, version: int | None) -> tuple[RouterConfig, str]:
    """The router's active configuration document and its config_version. The management API
    serves only the active document, so another --version is refused (exit 2), an unknown one 8."""
    from app.config.errors import ConfigError
    from app.config.loader import parse_config

    with client:
        response = client.request("GET", "/api/v1/config", params={"format": "json"})
        check(response)
        served = response.headers.get("x-svc-config-version", "?")
        if version is not None and str(version) != served:
            known = {str(v.get("config_version")) for v in config_versions(client)}
            if str(version) not in known:
                fail(f"config version {version} is unknown to {client.endpoint}", EXIT_NOT_FOUND)
            fail(
                f"version {version} is not active ({served} is); the management API serves only the "
                "active document: replay that one, or `benchmark run` a config file of the version",
                EXIT_INVALID,
            )
    try:
        return parse_config(response.json(), source=f"{client.endpoint}/api/v1/config").config, served
    except (ConfigError, ValueError) as exc:
        fail(f"the router's configuration cannot be replayed: {exc}", EXIT_INVALID)


def config_versions(client: MgmtClient) -> list[dict[str, object]]:
    listed = client.request("GET", "/api/v1/config/versions", params={"limit": 100})
    check(listed)
    versions = listed.json().get("versions", [])
    return [v for v in versions if isinstance(v, dict)]


router_options = [
    click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, type=float),
    click.option(
        "--token-env", default=DEFAULT_TOKEN_ENV, show_default=True, help="Env var with the management token."
    ),
]


def any_config(
    config_path: Path | None, target_name: str | None, url: str | None, timeout: float, token_env: str
) -> tuple[RouterConfig, str]:
    """--config FILE, --target NAME (either kind) or --url URL (a router's active config)."""
    if sum(x is not None for x in (config_path, target_name, url)) != 1:
        raise click.UsageError("give one of --config FILE, --target NAME, --url URL")
    if target_name is not None:
        try:
            kind = Registry(current_store()).target(target_name).kind
        except StoreError as exc:
            fail(str(exc), EXIT_INVALID)
        if kind == "config":
            return config_file(None, target_name)
    if config_path is not None:
        return config_file(config_path, None)
    client = router_client(url, target_name, timeout, token_env)
    config, served = fetch_config(client, None)
    return config, f"{client.endpoint}#version={served}"
