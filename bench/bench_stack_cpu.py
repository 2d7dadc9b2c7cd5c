"""CPU per request, by process, of the stack users run: where a routed request's CPU goes.

Starts `svc-sr serve` with the shipped configs/config.yaml as bench/bench_vs_litellm.py does (its
backends on an instant upstream on 127.0.0.1), then for each row (MoM and an explicit model, short
and ~500-token prompts, 16 clients, every prompt distinct) reads every process's CPU time (user +
system, psutil) before and after the load: CPU ms per request per role (a deployment's replicas
together; bench_vs_litellm.process_role), and the whole machine's (its other load included, so
read that column on a quiet machine only). The upstream's own CPU is left out (it runs in this
process's threads; the bench client too: "bench process").

    .venv/bin/python bench/bench_stack_cpu.py [--requests 200] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_all_signals import measure  # noqa: E402
from bench.bench_vs_litellm import EXPLICIT_MODEL, process_role, svc_sr  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

ROWS = (("MoM", 15), ("MoM", 500), (EXPLICIT_MODEL, 15), (EXPLICIT_MODEL, 500))


def cpu_by_role(root: int) -> dict[str, float]:
    """CPU seconds (user + system) so far per role of the stack's processes, and this process's."""
    top = psutil.Process(root)
    out: dict[str, float] = {}
    for process in [top, *top.children(recursive=True)]:
        try:
            times, role = process.cpu_times(), process_role(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out[role] = out.get(role, 0.0) + times.user + times.system
    own = psutil.Process().cpu_times()
    out["bench process"] = own.user + own.system
    return out


def machine_cpu_s() -> float:
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - times.iowait)


def row(url: str, root: int, model: str, tokens: int, total: int, clients: int) -> dict[str, Any]:
    before, machine, start = cpu_by_role(root), machine_cpu_s(), time.monotonic()
    result = asyncio.run(measure(url, model, total, clients, tokens))
    after, machine_after, wall = cpu_by_role(root), machine_cpu_s(), time.monotonic() - start
    per_request = {
        role: round(1000 * (after[role] - before.get(role, 0.0)) / total, 2)
        for role in sorted(after, key=lambda r: before.get(r, 0.0) - after[r])
        if after[role] - before.get(role, 0.0) > 0
    }
    stack = sum(ms for role, ms in per_request.items() if role != "bench process")
    return {
        "rps": round(result["rps"], 1),
        "p50_ms": round(result["p50_ms"], 2),
        "cpu_ms_per_request": per_request,
        "stack_cpu_ms_per_request": round(stack, 2),
        "machine_cpu_ms_per_request": round(1000 * (machine_after - machine) / total, 2),
        "wall_s": round(wall, 1),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to keep the stack up first")
    args = parser.parse_args()
    rows: dict[str, Any] = {}
    with (
        FakeUpstream(name="instant") as upstream,
        tempfile.TemporaryDirectory() as tmp,
        svc_sr(upstream, Path(tmp)) as (url, process),
    ):
        asyncio.run(measure(url, "MoM", 40, 4, 500))  # warm-up: pools, encoder shapes, replicas
        asyncio.run(measure(url, EXPLICIT_MODEL, 40, 4, 15))
        time.sleep(args.hold)
        for model, tokens in ROWS:
            total = args.requests if tokens < 100 else max(args.requests // 2, 50)
            name = f"{'MoM' if model == 'MoM' else 'explicit'} {tokens}tok@c{args.clients}"
            rows[name] = row(url, process.pid, model, tokens, total, args.clients)
            print(name, json.dumps(rows[name]), file=sys.stderr, flush=True)
    text = json.dumps({"cpu_count": os.cpu_count(), "rows": rows}, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
