"""`svc-sr benchmark agent` (app/benchmark/agent_traces.py): per-turn against session-aware
routing on labeled multi-turn traces; a keyword config, so no model loads."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.benchmark.agent_traces import TraceError, load_traces, run_agent_benchmark
from app.cli.main import cli
from app.config.loader import parse_config
from app.config.pricing import Pricing
from tests.unit.pipeline.test_sessions import document

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
}


def label(expected: str, kind: str, other: bool = False, vague: bool = False) -> dict:
    return {"expected": expected, "kind": kind, "other_domain": other, "vague": vague}


TRACE = {
    "id": "t1",
    "split": "heldout",
    "system": "You are an agent.",
    "turns": [
        {"add": [{"role": "user", "content": "fix the bug in this function"}], "label": label("code", "ask")},
        {
            "add": [CALL, {"role": "tool", "tool_call_id": "c1", "content": "tax stock tax"}],
            "label": label("code", "tool", other=True),
        },
        {
            "add": [{"role": "assistant", "content": "fixed"}, {"role": "user", "content": "ok, go ahead"}],
            "label": label("code", "followup", vague=True),
        },
        {
            "add": [
                {"role": "assistant", "content": "done"},
                {"role": "user", "content": "what tax applies to stock?"},
            ],
            "label": label("finance", "new_ask"),
        },
    ],
}


def test_per_turn_and_session_aware_on_one_trace(tmp_path: Path):
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(TRACE) + "\n\n" + json.dumps({**TRACE, "id": "t2", "split": "tuning"}) + "\n")
    traces = load_traces(path, "heldout")
    assert [t.id for t in traces] == ["t1"]
    report = asyncio.run(run_agent_benchmark(parse_config(document()).config, traces, "heldout"))
    base, sess = report.per_turn, report.session
    # per turn: code -> code -> general (the bare follow-up) -> finance; session: code kept, then finance
    assert (base.switches, sess.switches) == (2, 1)
    assert base.violations == sess.violations == 0
    assert (base.accuracy.hits, sess.accuracy.hits, base.accuracy.n) == (2, 3, 3)
    assert base.follows_ask.n == 1 and base.follows_ask.hits == 1
    assert sess.cost > 0 and base.cost > 0
    assert report.summary()["fewer_switches"] == 0.5


def test_turn_cost_reads_the_cache_and_writes_the_rest():
    pricing = Pricing(prompt_per_1m=3, cached_input_per_1m=0.3, cache_write_per_1m=3.75, completion_per_1m=15)
    assert pricing.turn_cost(1000, 0, 200) == pytest.approx((1000 * 3.75 + 200 * 15) / 1e6)
    assert pricing.turn_cost(1000, 800, 200) == pytest.approx((800 * 0.3 + 200 * 3.75 + 200 * 15) / 1e6)
    # a cache longer than the prompt (the answer is priced at 200 tokens, resent shorter) reads
    # the prompt and writes nothing: never a negative write
    assert pricing.turn_cost(1000, 1200, 200) == pytest.approx((1000 * 0.3 + 200 * 15) / 1e6)


def test_a_bad_trace_file_is_exit_2_with_its_line(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(TRACE) + "\n{not json\n")
    with pytest.raises(TraceError, match="bad.jsonl:2"):
        load_traces(path)
    result = CliRunner().invoke(cli, ["benchmark", "agent", str(path)])
    assert result.exit_code == 2 and "bad.jsonl:2" in result.output


def test_a_gzip_trace_file_reads_as_its_jsonl_and_a_broken_one_is_a_trace_error(tmp_path: Path):
    path = tmp_path / "traces.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(TRACE) + "\n").encode()))
    assert [t.id for t in load_traces(path)] == ["t1"]
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(json.dumps(TRACE).encode())[:40])
    with pytest.raises(TraceError, match="broken.jsonl.gz"):
        load_traces(broken)


def test_the_long_context_set_is_the_short_one_grown():
    """The two shipped sets hold the same conversations, turns and labels; only sizes differ
    (tests/data/agent_traces/README.md)."""
    here = Path("tests/data/agent_traces")
    short, long = load_traces(here / "traces.jsonl"), load_traces(here / "traces-long.jsonl.gz")
    assert [(t.id, t.split, [x.label for x in t.turns]) for t in short] == [
        (t.id, t.split, [x.label for x in t.turns]) for t in long
    ]
    assert all(len(b.system or "") > 8 * len(a.system or "") for a, b in zip(short, long, strict=True))


def test_the_long_context_set_is_what_its_script_builds(tmp_path: Path):
    out = tmp_path / "long.jsonl.gz"
    subprocess.run([sys.executable, "scripts/build_agent_traces.py", "--out", str(out)], check=True)
    assert out.read_bytes() == Path("tests/data/agent_traces/traces-long.jsonl.gz").read_bytes()
