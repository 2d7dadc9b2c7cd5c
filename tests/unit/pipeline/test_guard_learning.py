"""Refusals marked wrong through the outcomes API, and the guard changes recipe learning
proposes from them (app/pipeline/learning/guard_learning.py): proposed, never applied."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from app.pipeline.learning.recipe_learning import learn
from app.replays.replays import ReplayStore
from tests.unit.cli.test_cli_config import Server
from tests.unit.cli.test_recipe_learning import post_outcomes, propose
from tests.unit.management.test_management_support import Harness, base_document


def guarded_document() -> dict[str, Any]:
    document = base_document()
    document["global"] = {
        "model_catalog": {"modules": {"prompt_guard": {"enabled": True, "threshold": 0.6, "harmful": True}}}
    }
    document["routing"]["decisions"][0]["plugins"] = [
        {"type": "pii", "configuration": {"enabled": True, "pii_types_allowed": ["PERSON"]}}
    ]
    return document


def refused(rid: str, check: str, score: float, threshold: float, entities: list[str]) -> dict[str, Any]:
    return {
        "id": rid,
        "decision": "math",
        "selected_model": None,
        "status": 403,
        "response_path": "blocked",
        "refusal": {
            "check": check,
            "code": "x",
            "score": score,
            "threshold": threshold,
            "entities": entities,
        },
    }


JB = "jailbreak:global:prompt_guard"
PII = "pii:plugin:math"


def evidence() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Five false jailbreak refusals scoring 0.61-0.72, two right ones at 0.80 and 0.97; five
    false PII refusals naming IP_ADDRESS, one right one naming US_SSN."""
    records = [refused(f"jb-w{i}", JB, 0.61 + 0.0275 * i, 0.6, ["instruction_override"]) for i in range(5)]
    records += [refused("jb-r0", JB, 0.80, 0.6, []), refused("jb-r1", JB, 0.97, 0.6, [])]
    records += [refused(f"pii-w{i}", PII, 0.9, 0.5, ["IP_ADDRESS"]) for i in range(5)]
    records += [refused("pii-r0", PII, 0.95, 0.5, ["US_SSN"])]
    marks = [
        {"replay_id": r["id"], "target": "refusal", "verdict": "wrong"} for r in records if "-w" in r["id"]
    ]
    marks += [
        {"replay_id": r["id"], "target": "refusal", "verdict": "correct"} for r in records if "-r" in r["id"]
    ]
    return records, marks


def test_false_refusals_propose_a_higher_threshold_and_an_allowed_pii_type() -> None:
    document = guarded_document()
    records, marks = evidence()
    report = learn(document, records, marks)
    by_check = {p.check: p for p in report.guards.proposals}
    jailbreak = by_check[JB]
    assert (jailbreak.change, jailbreak.current, jailbreak.proposed) == ("raise_threshold", 0.6, 0.73)
    assert (jailbreak.released, jailbreak.kept) == (5, 2)
    pii = by_check[PII]
    assert (pii.change, pii.proposed, pii.released) == ("allow_pii_type", ["IP_ADDRESS", "PERSON"], 5)
    proposed = report.proposed_document
    assert proposed is not None
    assert proposed["global"]["model_catalog"]["modules"]["prompt_guard"]["threshold"] == 0.73
    plugin = proposed["routing"]["decisions"][0]["plugins"][0]["configuration"]
    assert plugin["pii_types_allowed"] == ["IP_ADDRESS", "PERSON"]
    assert document == guarded_document()  # the input is not touched


def test_a_right_refusal_caps_the_threshold_and_too_few_marks_propose_nothing() -> None:
    records, marks = evidence()
    records.append(refused("jb-r2", JB, 0.65, 0.6, []))  # marked right, below two false ones
    marks.append({"replay_id": "jb-r2", "target": JB, "verdict": "good"})  # the check's name as target
    report = learn(guarded_document(), records, marks)
    jailbreak = next(p for p in report.guards.proposals if p.check == JB)
    assert jailbreak.proposed == 0.65 and jailbreak.released == 2 and jailbreak.kept == 3

    few = learn(guarded_document(), records, marks[:4])
    assert few.guards.proposals == [] and few.proposed_document is None
    assert few.guards.skipped[JB] == "4 refusals marked wrong, fewer than 5"


def test_marks_on_answered_requests_or_other_targets_are_no_refusal_marks() -> None:
    records, marks = evidence()
    elsewhere = [{**m, "target": "big"} for m in marks]  # a verdict on a model, not on the refusal
    assert learn(guarded_document(), records, elsewhere).guards.marks == 0
    answered = [{k: v for k, v in r.items() if k != "refusal"} for r in records]
    assert learn(guarded_document(), answered, marks).guards.marks == 0


def test_marked_through_the_outcomes_api_proposed_by_the_cli_never_applied(tmp_path: Path) -> None:
    store = ReplayStore()
    records, marks = evidence()
    for record in records:
        store.record(copy.deepcopy(record))
    with Server(Harness(guarded_document(), replays=store)) as server:
        post_outcomes(server.url, marks)
        before = httpx.get(f"{server.url}/api/v1/config").headers["etag"]
        plan = tmp_path / "proposed.yaml"
        report = propose(server.url, plan)
        assert sorted(p["check"] for p in report["guards"]["proposals"]) == [JB, PII]
        written = yaml.safe_load(plan.read_text())
        assert written["global"]["model_catalog"]["modules"]["prompt_guard"]["threshold"] == 0.73
        assert httpx.get(f"{server.url}/api/v1/config").headers["etag"] == before  # not applied
        text = CliRunner().invoke(cli, ["optimize", "recipe-learning", "--endpoint", server.url])
        assert f"propose {JB}: raise_threshold 0.6 -> 0.73" in text.output
