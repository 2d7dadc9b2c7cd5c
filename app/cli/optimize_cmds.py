"""`svc-sr optimize recipe-learning`: read the router's replay records and outcomes, propose
decision changes as a configuration plan (app/pipeline/learning/recipe_learning.py). It never
writes to the router: `-o FILE` saves the proposed document, which `svc-sr config plan
--config FILE` shows and `svc-sr config apply --config FILE` activates, as a user decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from app.cli.remote import EXIT_INVALID, MgmtClient, Remote, check, echo_json, fail, remote_options

PAGE = 1000  # the replay list's largest page


def newest_replays(client: MgmtClient, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` replay records, oldest first: one small read learns the newest
    sequence, then the list pages forward from `limit` before it (sequences are consecutive)."""
    records: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        params = {"limit": PAGE if after is not None else 1, "after_sequence": after or 0}
        response = client.request("GET", "/api/v1/observability/replays", params=params)
        check(response)
        page = response.json()
        if after is None:
            newest = page.get("newest_sequence")
            after = max(newest - limit, 0) if isinstance(newest, int) else 0
            continue
        records = (records + page["records"])[-limit:]
        if not page["has_more"] or page["next_sequence"] <= after:
            return records
        after = page["next_sequence"]


@click.group("optimize")
def optimize() -> None:
    """Propose configuration changes from what the router observed (never applied by itself)."""


@optimize.command("recipe-learning")
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Newest replay records to read.",
)
@click.option(
    "--min-outcomes",
    default=5,
    show_default=True,
    type=click.IntRange(1),
    help="Outcomes a model needs to be compared.",
)
@click.option(
    "--margin",
    default=0.1,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Mean-outcome gap that counts as better.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the proposed configuration here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@remote_options
def recipe_learning(  # noqa: PLR0913 - the spec's options and the report's
    limit: int, min_outcomes: int, margin: float, output: Path | None, as_json: bool, remote: Remote
) -> None:
    """Analyze replay records and outcomes; propose decision changes as a configuration plan."""  # fmt: skip
    import yaml

    from app.common.persist import atomic_write_bytes
    from app.pipeline.learning.recipe_learning import learn

    with remote.client() as client:
        current = client.request("GET", "/api/v1/config", params={"format": "json"})
        check(current)
        records = newest_replays(client, limit)
        answered = client.request("GET", "/api/v1/observability/outcomes", params={"limit": 10_000})
        check(answered)
    report = learn(current.json(), records, answered.json()["outcomes"], min_outcomes, margin)
    if output is not None and report.proposed_document is not None:
        atomic_write_bytes(output, yaml.safe_dump(report.proposed_document, sort_keys=False).encode())
    if as_json:
        echo_json(report.model_dump(mode="json"))
    else:
        click.echo(f"{report.records} replay records, {report.outcomes_joined} with outcomes")
        for proposal in report.proposals:
            click.echo(
                f"propose {proposal.decision}: {proposal.proposed_first} before {proposal.current_first} "
                f"({proposal.change}: {proposal.reason})"
            )
        for decision, why in report.skipped.items():
            click.echo(f"keep {decision}: {why}")
        for guard in report.guards.proposals:
            click.echo(
                f"propose {guard.check}: {guard.change} {guard.current} -> {guard.proposed} ({guard.reason})"
            )
        for guard_check, why in report.guards.skipped.items():
            click.echo(f"keep {guard_check}: {why}")
    if output is not None:
        if report.proposed_document is None:
            fail(f"nothing to propose: {output} not written", EXIT_INVALID)
        click.echo(f"wrote {output}: review with `svc-sr config plan --config {output}`", err=True)
