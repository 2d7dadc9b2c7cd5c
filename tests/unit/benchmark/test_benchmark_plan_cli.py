"""`svc-sr benchmark plan | candidate-plan | preview | comparison-options | replay-options |
regrade | reconcile-usage | serve` on the mini dataset (every figure by hand: PRICES in
test_benchmark_runner.py, 448 prompt tokens over the six questions)."""

from __future__ import annotations

import json
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.benchmark.http_api import make_server, serve_in_thread
from app.benchmark.registry import Registry
from app.benchmark.store import RunStore
from app.cli.remote import EXIT_FAILURE, EXIT_INVALID
from tests.unit.benchmark.test_benchmark_cli import invoke
from tests.unit.benchmark.test_benchmark_runner import MATH_TO_BIG, MINI, document
from tests.unit.cli.test_cli_config import Server
from tests.unit.management.test_management_support import Harness

BIG_ALL = (448 * 2 + 900 * 4) / 1e6  # completion (400+800+1200+400+200+600)/4 = 900
SMALL_ALL = (448 + 325) * 0.1 / 1e6  # completion (100+200+300+400+200+100)/4 = 325


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "keyword.yaml"
    path.write_text(yaml.safe_dump(document(default="small", routing=MATH_TO_BIG)))
    return path


def as_json(store: Path, *args: str) -> Any:
    result = invoke(store, *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1] if args[0] in ("run", "recover") else result.stdout)


def test_plan_estimates_without_routing(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    plan = as_json(store, "plan", "--dataset", str(MINI), "--config", str(config_file), "--batch-size", "4")
    assert (plan["questions"], plan["prompt_tokens"], plan["batches"]) == (6, 448, 2)
    assert plan["categories"] == {"biology": 2, "law": 2, "math": 2}
    models = {m["name"]: m for m in plan["models"]}
    assert models["big"]["accuracy"] == pytest.approx(5 / 6) and models["small"]["accuracy"] == pytest.approx(
        0.5
    )
    assert plan["cost_low"] == pytest.approx(SMALL_ALL) and plan["cost_high"] == pytest.approx(BIG_ALL)
    assert plan["decisions"] == 1 and plan["default_model"] == "small" and plan["learned_signals"] == []
    assert plan["reusable_runs"] == [] and RunStore(store).run_ids() == []
    two = as_json(store, "plan", "--dataset", str(MINI), "--config", str(config_file), "--ids", "1,2")
    assert two["questions"] == 2 and two["categories"] == {"math": 2}
    neither = invoke(store, "plan", "--dataset", str(MINI))
    assert neither.exit_code == EXIT_INVALID and "one of --config" in neither.stderr


def test_candidate_plan_reuses_a_measured_config(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    other = tmp_path / "mid.yaml"
    other.write_text(yaml.safe_dump(document(default="mid")))
    as_json(store, "run", "--dataset", str(MINI), "--config", str(config_file))
    [baseline] = RunStore(store).run_ids()
    plan = as_json(
        store, "candidate-plan", "--dataset", str(MINI), "--config", str(config_file), "--config", str(other),
        "--baseline", baseline,
    )  # fmt: skip
    reuse, fresh = plan["candidates"]
    assert (reuse["action"], reuse["run"], reuse["command"]) == ("reuse", baseline, None)
    assert fresh["action"] == "run" and fresh["command"].endswith(f"--config {other.resolve()}")
    assert fresh["compare"] == f"svc-sr benchmark compare {baseline} <new run>"
    subset = as_json(
        store, "candidate-plan", "--dataset", str(MINI), "--config", str(config_file), "--limit", "2"
    )
    assert subset["candidates"][0]["action"] == "run"  # the stored run measured other questions
    none = invoke(store, "candidate-plan", "--dataset", str(MINI))
    assert none.exit_code == EXIT_INVALID


def test_preview_routes_a_few_and_stores_nothing(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    preview = as_json(store, "preview", "--dataset", str(MINI), "--config", str(config_file), "--limit", "3")
    assert [(r["question_id"], r["decision"], r["model"], r["correct"]) for r in preview["results"]] == [
        (1, "math", "big", True),
        (2, "math", "big", True),
        (3, None, "small", True),
    ]
    assert preview["summary"]["questions"] == 3 and RunStore(store).run_ids() == []
    default = as_json(store, "preview", "--dataset", str(MINI), "--config", str(config_file))
    assert len(default["results"]) == 5
    many = invoke(store, "preview", "--dataset", str(MINI), "--config", str(config_file), "--limit", "26")
    assert many.exit_code == EXIT_INVALID and "at most 25" in many.stderr


def test_comparison_options_pair_runs_of_one_dataset(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    other = tmp_path / "mini-copy"
    shutil.copytree(MINI, other)
    (other / "model_results.csv").write_text((MINI / "model_results.csv").read_text() + "1,tiny,A,0,10\n")

    def new_run(*args: str) -> str:
        """The id the run stored (ids made in one second do not sort by time)."""
        before = set(RunStore(store).run_ids()) if store.exists() else set()
        as_json(store, "run", *args, "--config", str(config_file))
        (made,) = set(RunStore(store).run_ids()) - before
        return made

    full = new_run("--dataset", str(MINI))
    subset = new_run("--dataset", str(MINI), "--ids", "2,3")
    new_run("--dataset", str(other))  # another dataset: never a comparison option of `full`
    options = as_json(store, "comparison-options", full)
    assert [(o["run_id"], o["shared_questions"]) for o in options["options"]] == [(subset, 2)]
    groups = as_json(store, "comparison-options")["groups"]
    assert [sorted(g["runs"]) for g in groups] == [sorted([subset, full])]
    assert invoke(store, "comparison-options", "nope").exit_code == EXIT_INVALID


@pytest.fixture
def router() -> Iterator[Server]:
    with Server(Harness(document(default="mid"))) as running:
        yield running


@pytest.mark.slow
def test_replay_options_lists_router_targets_and_versions(tmp_path: Path, router: Server):
    store = tmp_path / "store"
    offline = as_json(store, "replay-options")
    assert offline == {"targets": [], "router": None}
    assert invoke(store, "target", "register", "local", "--url", router.url).exit_code == 0
    found = as_json(store, "replay-options", "--target", "local")
    assert [t["name"] for t in found["targets"]] == ["local"]
    assert found["router"]["active_version"] == "1"
    assert [(v["config_version"], v["replayable"]) for v in found["router"]["versions"]] == [(1, True)]
    replayed = invoke(store, "replay", "--target", "local", "--dataset", str(MINI), "--json")
    assert replayed.exit_code == 0, replayed.stderr
    assert RunStore(store).list_runs()[0].config == f"{router.url}#version=1"


def test_regrade_grades_recorded_answers_against_the_key(tmp_path: Path):
    store = tmp_path / "store"
    dataset = tmp_path / "mini"
    shutil.copytree(MINI, dataset)
    results = dataset / "model_results.csv"
    results.write_text(results.read_text().replace("1,small,A,0,100", "1,small,A,1,100"))  # a wrong column
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump(document(default="small")))
    assert as_json(store, "run", "--dataset", str(dataset), "--config", str(small))[
        "accuracy"
    ] == pytest.approx(4 / 6)
    [run_id] = RunStore(store).run_ids()
    dry = as_json(store, "regrade", run_id, "--dry-run")
    assert dry["regraded_run"] is None and [
        (c["question_id"], c["was"], c["now"]) for c in dry["changes"]
    ] == [(1, True, False)]
    done = as_json(store, "regrade", run_id)
    assert done["accuracy_after"] == pytest.approx(3 / 6)
    regraded = RunStore(store).load_record(done["regraded_run"])
    assert regraded.kind == "regrade" and regraded.source_run == run_id
    assert regraded.summary.accuracy == pytest.approx(0.5) and regraded.summary.cost == pytest.approx(
        SMALL_ALL
    )
    assert RunStore(store).load_record(run_id).summary.accuracy == pytest.approx(4 / 6)  # never changed


def test_reconcile_usage_finds_a_tampered_row(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    as_json(store, "run", "--dataset", str(MINI), "--config", str(config_file))
    [run_id] = RunStore(store).run_ids()
    fine = as_json(store, "reconcile-usage", run_id)
    assert fine["reconciled"] is True and fine["checked"] == 6 and fine["repriced"] is True
    assert fine["prompt_tokens"] == 448 and fine["cost_expected"] == pytest.approx(fine["cost_stored"])
    path = store / "runs" / run_id / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["completion_tokens"] += 10
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bad = invoke(store, "reconcile-usage", run_id, "--json")
    assert bad.exit_code == EXIT_FAILURE
    mismatch = json.loads(bad.stdout)["mismatches"]
    assert [(m["question_id"], m["field"], m["stored"], m["expected"]) for m in mismatch] == [
        (1, "completion_tokens", 110, 100)
    ]


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serve_answers_read_only_json(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    as_json(store, "run", "--dataset", str(MINI), "--config", str(config_file))
    [run_id] = RunStore(store).run_ids()
    Registry(RunStore(store)).create_experiment("e")
    Registry(RunStore(store)).attach("e", [run_id])
    server = make_server(RunStore(store), "127.0.0.1", 0)
    serve_in_thread(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert get(f"{base}/healthz")[0] == 200
        status, runs = get(f"{base}/api/v1/runs?limit=1")
        assert status == 200 and runs["total"] == 1 and runs["runs"][0]["run_id"] == run_id
        assert get(f"{base}/api/v1/runs/{run_id[:15]}")[1]["summary"]["questions"] == 6
        page = get(f"{base}/api/v1/runs/{run_id}/results?offset=4&limit=10")[1]
        assert [r["question_id"] for r in page["results"]] == [5, 6] and page["total"] == 6
        assert get(f"{base}/api/v1/experiments/e")[1]["records"][0]["run_id"] == run_id
        assert get(f"{base}/api/v1/targets")[1] == {"targets": []}
        assert get(f"{base}/api/v1/active")[1] == {"runs": []}
        status, error = get(f"{base}/api/v1/runs/nope")
        assert status == 404 and error["error"]["code"] == "not_found"
        status, error = get(f"{base}/api/v1/runs?limit=0")
        assert status == 400 and error["error"]["param"] == "limit"
        request = urllib.request.Request(f"{base}/api/v1/runs", method="DELETE")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 405 and refused.value.headers["allow"] == "GET, HEAD"
    finally:
        server.shutdown()
        server.server_close()


def test_serve_on_a_port_in_use_is_bad_input(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        result = invoke(tmp_path, "serve", "--port", str(taken.getsockname()[1]))
    assert result.exit_code == EXIT_INVALID and "cannot listen" in result.stderr
    help_text = invoke(tmp_path, "serve", "--help").stdout
    assert "127.0.0.1" in help_text and "8090" in help_text
