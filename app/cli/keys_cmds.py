"""`svc-sr keys`: the data plane's API keys through the management API (docs/security.md
"Keys and budgets").

    svc-sr keys create NAME --model M [--model M ...] [--budget-usd 50 --period month]
                            [--team T] [--rpm 60]
    svc-sr keys list
    svc-sr keys revoke ID

`create` prints the key's secret once (it is not kept: only its hash is stored). Exit codes are
the remote commands' (app/cli/remote.py): 2 bad input, 7 no permission, 8 not found, 5 the key
store does not answer.
"""

from __future__ import annotations

from typing import Any

import click

from app.cli.remote import Remote, echo_json, remote_options

KEYS = "/api/v1/keys"


@click.group()
def keys() -> None:
    """Issue, list and revoke the data plane's API keys (management API /api/v1/keys)."""


@keys.command("create")
@click.argument("name")
@click.option("--model", "models", multiple=True, required=True, help="A granted model (repeatable).")
@click.option("--budget-usd", type=float, default=None, help="Spend limit per period, in USD.")
@click.option("--period", type=click.Choice(["day", "week", "month"]), default="month", show_default=True)
@click.option("--team", default=None, help="The team whose budget this key's spend also counts against.")
@click.option("--rpm", type=int, default=None, help="This key's own rate limit (requests per minute).")
@remote_options
def create(
    name: str,
    models: tuple[str, ...],
    budget_usd: float | None,
    period: str,
    team: str | None,
    rpm: int | None,
    remote: Remote,
) -> None:
    """Issue a key; its secret is printed this once."""
    spec: dict[str, Any] = {"name": name, "models": list(models), "team": team}
    if budget_usd is not None:
        spec["budget"] = {"usd": budget_usd, "period": period}
    if rpm is not None:
        spec["rate_limit"] = {"requests_per_minute": rpm}
    echo_json(remote.call("POST", KEYS, json=spec))


@keys.command("list")
@remote_options
def list_keys(remote: Remote) -> None:
    """Every key (never a secret) with its granted models and spend."""
    for key in remote.call("GET", KEYS)["data"]:
        spend = ", ".join(
            f"{s['owner']} {s['spent_usd']:.4f}/{s['usd']} USD per {s['period']}" for s in key["spend"]
        )
        click.echo(f"{key['id']}  {key['name']}  models {','.join(key['models'])}  {spend or 'no budget'}")


@keys.command("revoke")
@click.argument("key_id")
@remote_options
def revoke(key_id: str, remote: Remote) -> None:
    """Revoke KEY_ID: refused (401) by every replica within a second."""
    echo_json(remote.call("DELETE", f"{KEYS}/{key_id}"))
