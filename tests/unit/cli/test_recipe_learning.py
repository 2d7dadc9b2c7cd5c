"""Recipe learning: evidence per decision and model from replays and outcomes, the proposals
it supports, and `svc-sr optimize recipe-learning` against a real management server."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from app.cli.optimize_cmds import newest_replays
from app.pipeline.learning.recipe_learning import learn
from app.replays.replays import ReplayStore
from tests.unit.cli.test_cli_config import Server
from tests.unit.management.test_management_support import Harness, base_document


def two_model_document() -> dict[str, Any]:
    document = base_document()
    document["routing"]["decisions"][0]["modelRefs"] = [{"model": "big"}, {"model": "small"}]
    return document


def records(model: str, n: int, cost: float, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{model}-{i}",
            "decision": "math",
            "selected_model": model,
            "served_model": model,
            "status": 200,
            "cost": {"amount": cost, "currency": "USD"},
            "latency_ms": 100.0 + i,
        }
        for i in range(start, start + n)
    ]


def outcomes(model: str, n: int, verdict: str) -> list[dict[str, Any]]:
    return [{"replay_id": f"{model}-{i}", "target": model, "verdict": verdict} for i in range(n)]


def post_outcomes(url: str, posted: list[dict[str, Any]]) -> None:
    for outcome in posted:
        answer = httpx.post(f"{url}/api/v1/observability/outcomes", json=outcome, timeout=10)
        assert answer.status_code == 201, answer.text


def propose(url: str, plan: Path) -> dict[str, Any]:
    """`svc-sr optimize recipe-learning --json -o PLAN` against the router at `url`: its report."""
    result = CliRunner().invoke(
        cli,
        ["optimize", "recipe-learning", "--endpoint", url, "--json", "-o", str(plan)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_a_better_model_listed_later_is_proposed_first() -> None:
    document = two_model_document()
    report = learn(
        document,
        records("big", 6, 0.02) + records("small", 6, 0.001),
        outcomes("big", 6, "bad") + outcomes("small", 6, "thumbs_up"),
    )
    (proposal,) = report.proposals
    assert (proposal.change, proposal.current_first, proposal.proposed_first) == (
        "prefer_model",
        "big",
        "small",
    )
    refs = report.proposed_document["routing"]["decisions"][0]["modelRefs"]  # type: ignore[index]
    assert [r["model"] for r in refs] == ["small", "big"]
    assert document == two_model_document()  # the input is not touched
    small = next(m for m in report.decisions[0].models if m.model == "small")
    assert small.outcomes == 6 and small.mean_outcome == 1.0 and small.mean_cost == 0.001


def test_equal_quality_prefers_the_cheaper_model_and_too_little_evidence_proposes_nothing() -> None:
    both_good = outcomes("big", 5, "good") + outcomes("small", 5, "good")
    cheaper = learn(two_model_document(), records("big", 5, 0.02) + records("small", 5, 0.001), both_good)
    assert [(p.change, p.proposed_first) for p in cheaper.proposals] == [("prefer_cheaper", "small")]

    sparse = learn(two_model_document(), records("big", 5, 0.02) + records("small", 5, 0.001), both_good[:4])
    assert sparse.proposals == [] and sparse.proposed_document is None
    assert "fewer than 5 outcomes" in sparse.skipped["math"]


def test_elo_and_single_model_decisions_are_left_alone() -> None:
    document = two_model_document()
    elo = copy.deepcopy(document)
    elo["routing"]["decisions"][0]["algorithm"] = {"type": "elo"}
    evidence = (records("big", 6, 0.02) + records("small", 6, 0.001), outcomes("small", 6, "good"))
    assert learn(elo, *evidence).proposals == []
    assert "online" in learn(elo, *evidence).skipped["math"]
    assert learn(base_document(), *evidence).skipped["math"].startswith("one model listed")


@pytest.mark.slow
def test_the_cli_reads_replays_and_outcomes_and_writes_a_plan_it_never_applies(tmp_path: Path) -> None:
    store = ReplayStore()
    for record in records("big", 6, 0.02) + records("small", 6, 0.001):
        store.record(record)
    harness = Harness(two_model_document(), replays=store)
    with Server(harness) as server:
        post_outcomes(server.url, outcomes("big", 6, "wrong") + outcomes("small", 6, "correct"))
        listed = httpx.get(f"{server.url}/api/v1/observability/outcomes", params={"limit": 3}).json()
        assert listed["total"] == 12 and len(listed["outcomes"]) == 3
        before = httpx.get(f"{server.url}/api/v1/config").headers["etag"]

        plan = tmp_path / "proposed.yaml"
        report = propose(server.url, plan)
        assert report["records"] == 12 and report["outcomes_joined"] == 12
        assert [p["proposed_first"] for p in report["proposals"]] == ["small"]
        written = yaml.safe_load(plan.read_text())
        assert [r["model"] for r in written["routing"]["decisions"][0]["modelRefs"]] == ["small", "big"]
        # Proposed, not applied: the router's configuration is the one it had.
        assert httpx.get(f"{server.url}/api/v1/config").headers["etag"] == before

        few = CliRunner().invoke(
            cli, ["optimize", "recipe-learning", "--endpoint", server.url, "--limit", "4"]
        )
        assert few.exit_code == 0 and "keep math:" in few.output and "propose" not in few.output


@pytest.mark.slow
def test_the_newest_replays_are_read_from_the_end_not_paged_from_the_start() -> None:
    """2,500 records, the newest 5 wanted: one read of the newest sequence, one page after it."""
    store = ReplayStore(capacity=5000)
    for record in records("big", 2500, 0.02):
        store.record(record)
    with Server(Harness(two_model_document(), replays=store)) as server:
        asked: list[dict[str, Any]] = []

        class Client:
            def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
                asked.append(kwargs["params"])
                return httpx.request(method, f"{server.url}{path}", timeout=10, **kwargs)

        newest = newest_replays(Client(), 5)  # type: ignore[arg-type]  # only .request is used
    assert [r["sequence"] for r in newest] == [2496, 2497, 2498, 2499, 2500]
    assert len(asked) == 2 and asked[1]["after_sequence"] == 2495
