"""`svc-sr benchmark experiment | target | dataset combine/exclusions/preparations | catalog |
setup` and `--no-autostart`, through click's CliRunner on a temporary store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from app.benchmark.registry import Registry
from app.benchmark.store import RunStore
from app.cli.remote import EXIT_INVALID
from tests.unit.benchmark.test_benchmark_cli import invoke
from tests.unit.benchmark.test_benchmark_runner import MATH_TO_BIG, MINI, document


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "keyword.yaml"
    path.write_text(yaml.safe_dump(document(default="small", routing=MATH_TO_BIG)))
    return path


def run_json(store: Path, *args: str) -> dict:
    result = invoke(store, "run", "--dataset", str(MINI), *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_experiments_group_runs(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    assert invoke(store, "experiment", "create", "keyword", "--description", "math to big").exit_code == 0
    again = invoke(store, "experiment", "create", "keyword")
    assert again.exit_code == EXIT_INVALID and "already exists" in again.stderr
    run_json(store, "--config", str(config_file), "--experiment", "keyword")
    run_json(store, "--config", str(config_file), "--limit", "2")
    first, second = RunStore(store).run_ids()[::-1]
    # a run is named by any prefix that names it alone: two runs in one second share 16
    # characters, and 1 in 16 a 17th (the flake this replaced)
    prefix = next(second[:n] for n in range(17, len(second) + 1) if not first.startswith(second[:n]))
    attached = invoke(store, "experiment", "attach", "keyword", prefix, first)
    assert attached.exit_code == 0 and "1 run(s) attached, 1 attached already (2 in all)" in attached.stderr
    shown = json.loads(invoke(store, "experiment", "show", "keyword", "--json").stdout)
    assert shown["runs"] == [first, second] and shown["missing"] == []
    assert [r["summary"]["questions"] for r in shown["records"]] == [2, 6]  # best accuracy first (1.0, 5/6)
    listed = json.loads(invoke(store, "experiment", "list", "--json").stdout)
    assert [(e["name"], len(e["runs"])) for e in listed["experiments"]] == [("keyword", 2)]
    unknown_run = invoke(store, "experiment", "attach", "keyword", "nope")
    assert unknown_run.exit_code == EXIT_INVALID and "no run 'nope'" in unknown_run.stderr
    unknown = invoke(store, "run", "--dataset", str(MINI), "--config", str(config_file), "--experiment", "x")
    assert unknown.exit_code == EXIT_INVALID and "no experiment 'x'" in unknown.stderr
    assert len(RunStore(store).run_ids()) == 2  # refused before any work
    deleted = invoke(store, "experiment", "delete", "keyword")
    assert deleted.exit_code == 0 and "2 run(s) kept" in deleted.stderr
    assert len(RunStore(store).run_ids()) == 2
    assert invoke(store, "experiment", "show", "keyword").exit_code == EXIT_INVALID
    assert invoke(store, "experiment", "create", "../escape").exit_code == EXIT_INVALID


def test_targets_name_configs_and_routers(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    assert invoke(store, "target", "register", "kw", "--config", str(config_file)).exit_code == 0
    router = invoke(store, "target", "register", "prod", "--url", "http://127.0.0.1:9/", "--token-env", "T")
    assert router.exit_code == 0
    listed = json.loads(invoke(store, "target", "list", "--json").stdout)["targets"]
    assert [(t["name"], t["kind"], t["url"] or t["config"]) for t in listed] == [
        ("kw", "config", str(config_file.resolve())),
        ("prod", "router", "http://127.0.0.1:9"),
    ]
    assert run_json(store, "--target", "kw")["questions"] == 6
    assert RunStore(store).list_runs()[0].config == str(config_file.resolve())
    wrong_kind = invoke(store, "run", "--dataset", str(MINI), "--target", "prod")
    assert wrong_kind.exit_code == EXIT_INVALID and "router target" in wrong_kind.stderr
    both = invoke(store, "run", "--dataset", str(MINI), "--target", "kw", "--config", str(config_file))
    assert both.exit_code == EXIT_INVALID
    for args, message in [
        (["kw", "--config", str(config_file)], "already exists"),
        (["x", "--url", "ftp://h"], "http:// or https://"),
        (["x"], "one of them"),
        (["x", "--config", str(tmp_path / "none.yaml")], "none.yaml"),
    ]:
        result = invoke(store, "target", "register", *args)
        assert result.exit_code == EXIT_INVALID and message in result.stderr, (args, result.stderr)
    assert invoke(store, "target", "register", "kw", "--url", "http://h", "--replace").exit_code == 0


def test_exclusions_leave_questions_out_of_runs_of_the_prepared_name(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    assert invoke(store, "dataset", "prepare", str(MINI), "--name", "mini").exit_code == 0
    shown = invoke(store, "dataset", "exclusions", "mini", "--add", "1,2")
    assert shown.exit_code == 0 and "2 of 6 questions excluded: 1, 2" in shown.stdout
    after = json.loads(invoke(store, "dataset", "exclusions", "mini", "--remove", "2", "--json").stdout)
    assert after["question_ids"] == [1] and after["questions"] == 6
    summary = run_json(store, "--config", str(config_file)).get("questions")
    assert summary == 6  # a directory is not a prepared name: nothing excluded
    by_name = invoke(store, "run", "--dataset", "mini", "--config", str(config_file), "--json")
    assert json.loads(by_name.stdout.splitlines()[-1])["questions"] == 5
    assert RunStore(store).list_runs()[0].question_ids == [2, 3, 4, 5, 6]
    named = invoke(store, "run", "--dataset", "mini", "--config", str(config_file), "--ids", "1,3")
    assert named.exit_code == EXIT_INVALID and "excluded" in named.stderr
    unknown = invoke(store, "dataset", "exclusions", "mini", "--add", "99")
    assert unknown.exit_code == EXIT_INVALID and "99" in unknown.stderr
    assert invoke(store, "dataset", "exclusions", "mini", "--add", "x").exit_code == EXIT_INVALID
    cleared = json.loads(invoke(store, "dataset", "exclusions", "mini", "--clear", "--json").stdout)
    assert cleared["question_ids"] == []
    assert invoke(store, "dataset", "exclusions", "nope").exit_code == EXIT_INVALID


def copy_dataset(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(MINI, target)
    return target


def test_combine_merges_same_questions_and_renumbers_clashes(tmp_path: Path):
    store = tmp_path / "store"
    twin = copy_dataset(tmp_path, "twin")
    merged = invoke(store, "dataset", "combine", "both", str(MINI), str(twin), "--json")
    assert merged.exit_code == 0, merged.stderr
    index = json.loads(merged.stdout)
    assert (index["questions"], index["results"]) == (6, 18)  # the same questions, answers once
    other = copy_dataset(tmp_path, "other")
    questions = other / "questions.jsonl"
    questions.write_text(questions.read_text().replace("12 divided by 4", "12 divided by 3"))
    clash = invoke(store, "dataset", "combine", "x", str(MINI), str(other))
    assert clash.exit_code == EXIT_INVALID and "question_id 1 is another question" in clash.stderr
    renumbered = json.loads(
        invoke(store, "dataset", "combine", "x", str(MINI), str(other), "--renumber", "--json").stdout
    )
    assert (renumbered["questions"], renumbered["results"]) == (12, 36)
    assert RunStore(store).load_dataset("x").path == str(store.resolve() / "datasets" / "combined" / "x")
    one = invoke(store, "dataset", "combine", "y", str(MINI))
    assert one.exit_code == EXIT_INVALID and "two sources" in one.stderr


def test_preparations_say_when_files_changed(tmp_path: Path):
    store = tmp_path / "store"
    copy = copy_dataset(tmp_path, "copy")
    invoke(store, "dataset", "prepare", str(MINI), "--name", "mini")
    invoke(store, "dataset", "prepare", str(copy))
    with (copy / "model_results.csv").open("a") as out:
        out.write("1,tiny,A,0,10\n")
    rows = json.loads(invoke(store, "dataset", "preparations", "--json").stdout)["preparations"]
    assert [(r["name"], r["status"]) for r in rows] == [("copy", "changed"), ("mini", "current")]
    shutil.rmtree(copy)
    rows = json.loads(invoke(store, "dataset", "preparations", "--json").stdout)["preparations"]
    assert rows[0]["status"] == "missing"


def test_setup_catalog_and_no_autostart(tmp_path: Path):
    store = tmp_path / "store"
    root = tmp_path / "data"
    shutil.copytree(MINI, root / "mini")
    shutil.copytree(MINI, root / "nested" / "mini")
    (root / "empty").mkdir()
    refused = invoke(store, "--no-autostart", "runs")
    assert refused.exit_code == EXIT_INVALID and "benchmark setup" in refused.stderr
    catalog = json.loads(invoke(store, "catalog", "--root", str(root), "--json").stdout)["datasets"]
    assert [(Path(e["path"]).relative_to(root.resolve()), e["prepared_as"]) for e in catalog] == [
        (Path("mini"), []),
        (Path("nested/mini"), []),
    ]
    made = json.loads(invoke(store, "--no-autostart", "setup", "--root", str(root), "--json").stdout)
    assert made["created"] is True and made["prepared"] == ["mini", "mini-2"] and made["failed"] == {}
    assert Registry(RunStore(store)).marker() is not None
    again = json.loads(invoke(store, "setup", "--root", str(root), "--json").stdout)
    assert again["created"] is False and again["prepared"] == []
    assert invoke(store, "--no-autostart", "runs").exit_code == 0
    catalog = json.loads(invoke(store, "catalog", "--root", str(root), "--json").stdout)["datasets"]
    assert [e["prepared_as"] for e in catalog] == [["mini"], ["mini-2"]]
    missing = invoke(store, "catalog", "--root", str(tmp_path / "none"))
    assert missing.exit_code == EXIT_INVALID
