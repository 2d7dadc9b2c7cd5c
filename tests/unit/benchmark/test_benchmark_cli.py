"""`svc-sr benchmark` dataset / run / replay through click's CliRunner, and the run store
(app/benchmark/store.py): runs written atomically, listed newest first, named by id prefix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from app.benchmark.records import QuestionResult, RunRecord, Summary
from app.benchmark.store import RunStore, StoreError
from app.cli.main import cli
from app.cli.remote import EXIT_INVALID, EXIT_NOT_FOUND, EXIT_UNREACHABLE
from tests.unit.benchmark.test_benchmark_runner import MATH_TO_BIG, MINI, document
from tests.unit.cli.test_cli_config import Server
from tests.unit.management.test_management_support import Harness

# small gets 1..6 right except 1, 2 and 4; with math to big (right on 1, 2): 5 of 6
KEYWORD_ACCURACY = 5 / 6
KEYWORD_COST = ((69 * 2 + 100 * 4) + (72 * 2 + 200 * 4) + 557 * 0.1) / 1e6


def invoke(store: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["benchmark", "--store", str(store), *args], catch_exceptions=False)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "keyword.yaml"
    path.write_text(yaml.safe_dump(document(default="small", routing=MATH_TO_BIG)))
    return path


@pytest.mark.slow
def test_run_json_last_line_and_the_stored_run(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    result = invoke(store, "run", "--dataset", str(MINI), "--config", str(config_file), "--json")
    assert result.exit_code == 0, result.stderr
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(last) == {"accuracy", "cost", "questions"}
    assert last["accuracy"] == pytest.approx(KEYWORD_ACCURACY)
    assert last["cost"] == pytest.approx(KEYWORD_COST)
    assert last["questions"] == 6
    assert "accuracy" in result.stderr  # the summary table goes to stderr
    [record] = RunStore(store).list_runs()
    assert record.kind == "run" and record.config == str(config_file.resolve())
    assert record.decision_mix == {"(default)": 4, "math": 2} and record.model_mix == {"small": 4, "big": 2}
    assert record.question_ids is None
    results = RunStore(store).load_results(record.run_id[:8])
    assert [r.question_id for r in results] == [1, 2, 3, 4, 5, 6]


def test_a_subset_by_limit_or_ids(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    limited = invoke(
        store, "run", "--dataset", str(MINI), "--config", str(config_file), "--limit", "2", "--json"
    )
    assert json.loads(limited.stdout.splitlines()[-1]) == {
        "accuracy": 1.0,
        "cost": pytest.approx(1482 / 1e6),
        "questions": 2,
    }
    chosen = invoke(
        store, "run", "--dataset", str(MINI), "--config", str(config_file), "--ids", "4,3", "--json"
    )
    assert json.loads(chosen.stdout.splitlines()[-1])["accuracy"] == pytest.approx(1 / 2)
    assert sorted(r.question_ids or [] for r in RunStore(store).list_runs()) == [[1, 2], [4, 3]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ids", "1,99"], "no question with id 99"),
        (["--ids", "1,x"], "give question ids as 1,2,3"),
        (["--ids", "1", "--limit", "2"], "--ids and --limit"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_bad_selections_are_usage_errors(tmp_path: Path, config_file: Path, args: list[str], message: str):
    store = tmp_path / "store"
    result = invoke(store, "run", "--dataset", str(MINI), "--config", str(config_file), *args)
    assert result.exit_code == EXIT_INVALID and message in result.stderr
    assert RunStore(store).run_ids() == []


def test_bad_input_is_one_message_and_exit_2(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "questions.jsonl").write_text((MINI / "questions.jsonl").read_text())
    (broken / "model_results.csv").write_text("question_id,model,pred,correct,output_chars\n1,big,B,2,10\n")
    bad_data = invoke(store, "run", "--dataset", str(broken), "--config", str(config_file))
    assert (
        bad_data.exit_code == EXIT_INVALID
        and "model_results.csv:2: correct must be 0 or 1" in bad_data.stderr
    )
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text(yaml.safe_dump({"version": "v0.3", "providers": {"models": []}}))
    invalid = invoke(store, "run", "--dataset", str(MINI), "--config", str(bad_config))
    assert invalid.exit_code == EXIT_INVALID and "providers.models" in invalid.stderr
    nowhere = invoke(store, "run", "--dataset", "no-such-dataset", "--config", str(config_file))
    assert nowhere.exit_code == EXIT_INVALID and "neither a dataset directory" in nowhere.stderr
    assert RunStore(store).run_ids() == [] and "Traceback" not in bad_data.stderr + invalid.stderr


def test_dataset_prepare_show_options_and_run_by_name(tmp_path: Path, config_file: Path):
    store = tmp_path / "store"
    prepared = invoke(store, "dataset", "prepare", str(MINI), "--name", "mini", "--json")
    assert prepared.exit_code == 0, prepared.stderr
    index = json.loads(prepared.stdout)
    assert (index["questions"], index["results"], index["models"]) == (6, 18, ["big", "mid", "small"])
    assert index["categories"] == {"biology": 2, "law": 2, "math": 2}
    assert index["accuracy"] == {
        "big": pytest.approx(5 / 6),
        "mid": pytest.approx(4 / 6),
        "small": pytest.approx(3 / 6),
    }
    shown = invoke(store, "dataset", "show", "mini")
    assert shown.exit_code == 0 and "6 questions, 18 results" in shown.stdout
    assert invoke(store, "dataset", "show", "other").exit_code == EXIT_INVALID
    invoke(store, "dataset", "prepare", str(MINI), "--name", "mini-copy")
    listed = json.loads(invoke(store, "dataset", "options", "--limit", "1", "--json").stdout)
    assert listed["total"] == 2 and [d["name"] for d in listed["datasets"]] == ["mini"]
    for limit in ("0", "26"):
        assert invoke(store, "dataset", "options", "--limit", limit).exit_code == EXIT_INVALID
    by_name = invoke(store, "run", "--dataset", "mini", "--config", str(config_file), "--json")
    assert json.loads(by_name.stdout.splitlines()[-1])["questions"] == 6


def test_prepare_refuses_a_malformed_dataset_and_writes_nothing(tmp_path: Path):
    store = tmp_path / "store"
    result = invoke(store, "dataset", "prepare", str(tmp_path / "missing"))
    assert result.exit_code == EXIT_INVALID and "not a dataset directory" in result.stderr
    assert not (store / "datasets").exists() or not any((store / "datasets").iterdir())


# ---------------------------------------------------------------------- the store


def record(run_id: str, created_at: str = "2026-01-01T00:00:00+00:00") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        created_at=created_at,
        dataset="/data",
        dataset_fingerprint="f",
        config="/config.yaml",
        config_fingerprint="c",
        summary=Summary(accuracy=1.0, cost=0.5, questions=1),
    )


ROW = QuestionResult(question_id=1, category="math", model="big", correct=True)


def test_runs_newest_first_and_named_by_a_unique_prefix(tmp_path: Path):
    store = RunStore(tmp_path)
    store.save(record("20260101-000000-aaaaaa"), [ROW])
    store.save(record("20260102-000000-bbbbbb"), [ROW])
    assert [r.run_id for r in store.list_runs()] == ["20260102-000000-bbbbbb", "20260101-000000-aaaaaa"]
    assert store.resolve("20260102") == "20260102-000000-bbbbbb"
    assert store.load("20260101-000000-aaaaaa")[1] == [ROW]
    with pytest.raises(StoreError, match="ambiguous"):
        store.resolve("2026")
    with pytest.raises(StoreError, match="no run 'zzz'"):
        store.resolve("zzz")
    with pytest.raises(StoreError, match="already exists"):
        store.save(record("20260101-000000-aaaaaa"), [])


def test_a_failed_write_leaves_no_run_and_no_temporary_files(tmp_path: Path):
    store = RunStore(tmp_path)
    not_a_number: Any = object()  # JSON cannot write it: the save fails half way
    unserializable = QuestionResult.model_construct(question_id=1, category="math", cost=not_a_number)
    with pytest.raises(Exception):  # noqa: B017 - whatever pydantic raises, nothing may be left behind
        store.save(record("20260101-000000-cccccc"), [ROW, unserializable])
    assert store.run_ids() == [] and list(store.runs_dir.iterdir()) == []


def test_a_damaged_run_is_left_out_of_the_list_and_named_when_loaded(tmp_path: Path):
    store = RunStore(tmp_path)
    store.save(record("20260101-000000-aaaaaa"), [ROW])
    (store.runs_dir / "20260101-000000-aaaaaa" / "run.json").write_text("{")
    assert store.list_runs() == []
    with pytest.raises(StoreError, match="unreadable run record"):
        store.load_record("20260101")


def test_the_default_store_follows_the_state_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from app.benchmark.store import default_store_dir

    monkeypatch.setenv("SVC_SR_STATE_DIR", str(tmp_path))
    assert default_store_dir() == tmp_path / "benchmark"
    monkeypatch.delenv("SVC_SR_STATE_DIR")
    assert default_store_dir() == Path(".cache/benchmark")


# ---------------------------------------------------------------------- replay


@pytest.fixture
def router() -> Iterator[Server]:
    """A management API serving the mini models with `mid` as the default model."""
    served: dict[str, Any] = document(default="mid")
    with Server(Harness(served)) as running:
        yield running


@pytest.mark.slow
def test_replay_scores_the_active_config_of_a_running_router(tmp_path: Path, router: Server):
    store = tmp_path / "store"
    result = invoke(store, "--url", router.url, "replay", "--dataset", str(MINI), "--json")
    assert result.exit_code == 0, result.stderr
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["accuracy"] == pytest.approx(4 / 6)  # mid alone: right on 1, 3, 4, 5
    assert last["cost"] == pytest.approx((448 + 525) * 0.5 / 1e6)
    [stored] = RunStore(store).list_runs()
    assert stored.kind == "replay" and stored.config == f"{router.url}#version=1"
    assert (
        invoke(store, "replay", "--url", router.url, "--dataset", str(MINI), "--version", "1").exit_code == 0
    )
    unknown = invoke(store, "replay", "--url", router.url, "--dataset", str(MINI), "--version", "7")
    assert unknown.exit_code == EXIT_NOT_FOUND and "version 7" in unknown.stderr


def test_replay_without_a_router(tmp_path: Path):
    result = invoke(tmp_path, "replay", "--url", "http://127.0.0.1:9", "--dataset", str(MINI))
    assert result.exit_code == EXIT_UNREACHABLE and "cannot reach" in result.stderr
