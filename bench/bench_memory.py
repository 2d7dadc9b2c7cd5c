"""The local stack's memory, per process: what `bench_vs_litellm.py` reports, without LiteLLM.

Starts `svc-sr serve` with the shipped configs/config.yaml on an instant upstream, as
bench/bench_vs_litellm.py does (its `svc_sr()` and `stack_memory()`), and prints PSS per process
with the packages whose files each maps (/proc/PID/smaps: torch, onnxruntime, spacy, ...),
once ready and after a load (100 explicit-model ~500- and ~15-token requests at 16 clients,
then 100 MoM requests at each of ~15 / ~500 tokens and 1 / 16 clients); `--probe` then calls
the diagnostics, /v1/decisions and the storage API twice each (a deployment started on demand
answers the first). The JSON lines are `stack_memory()`'s; `--json FILE` also writes them with
the load's rows (p50/p99 ms, req/s: a memory cut must not cost the request path). The stack
inherits this process's environment, so a setting is compared by alternating runs with and
without it (`MALLOC_ARENA_MAX=2 ...`).
docs/performance.md "Memory of the local stack" quotes it.

    .venv/bin/python bench/bench_memory.py [--no-load] [--probe] [--json FILE] [--serve-config FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_all_signals import measure  # noqa: E402
from bench.bench_vs_litellm import EXPLICIT_MODEL, stack_memory, svc_sr  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

PACKAGE = re.compile(r"site-packages/([^/]+)/")
PROBES = (
    ("/api/v1/diagnostics/classify/intent", {"text": "What is the derivative of x^2?"}),
    (
        "/v1/decisions",
        {
            "state": "please refund my order",
            "questions": {"refund": {"type": "noul", "instructions": "Refund?"}},
        },
    ),
    ("/api/v1/storage/vector-stores", {"name": "probe"}),  # Storage, started on its first call
)


def mapped_kib(pid: int) -> dict[str, int]:
    """PSS (KiB) of one process by what its pages belong to: a site-packages package, another
    file, or the anonymous memory and heap."""
    out: dict[str, int] = defaultdict(int)
    where = "[anon]"
    try:
        with open(f"/proc/{pid}/smaps") as smaps:
            for line in smaps:
                first = line.split(" ", 1)[0]
                if "-" in first and all(c in "0123456789abcdef-" for c in first):
                    fields = line.split(None, 5)
                    path = fields[5].strip() if len(fields) > 5 else "[anon]"
                    found = PACKAGE.search(path)
                    where = (
                        found.group(1).split(".")[0]
                        if found
                        else (Path(path).name if path[:1] == "/" else path)
                    )
                elif line.startswith("Pss:"):
                    out[where] += int(line.split()[1])
    except OSError:
        pass
    return out


def report(root: int, label: str) -> dict[str, Any]:
    rows = []
    top = psutil.Process(root)
    for process in [top, *top.children(recursive=True)]:
        try:
            rows.append((process.memory_full_info().pss, process.pid, " ".join(process.cmdline())[:140]))
        except psutil.Error:
            continue
    rows.sort(reverse=True)
    print(f"== {label}: {len(rows)} processes, PSS {sum(r[0] for r in rows) / 2**20:.0f} MiB")
    for pss, pid, command in rows:
        split = sorted(mapped_kib(pid).items(), key=lambda item: -item[1])
        parts = ", ".join(f"{name}:{kib / 1024:.0f}" for name, kib in split[:8] if kib > 2048)
        print(f"{pss / 2**20:7.1f}  {pid:7d}  {command}\n           {parts}")
    memory = stack_memory(root)
    print(json.dumps(memory), flush=True)
    return memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-load", action="store_true")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--serve-config", type=Path, help="`svc-sr serve --serve-config` (default: its own)")
    parser.add_argument("--json", type=Path, help="also write the memory and the load's rows here")
    args = parser.parse_args()
    result: dict[str, Any] = {"memory": {}, "rows": {}}
    with FakeUpstream(name="instant") as upstream, tempfile.TemporaryDirectory() as tmp:
        began = time.monotonic()
        with svc_sr(upstream, Path(tmp), args.serve_config) as (url, process):
            print(f"ready in {time.monotonic() - began:.0f} s")
            time.sleep(5)
            result["memory"]["ready"] = report(process.pid, "ready")
            if not args.no_load:
                loads = [(EXPLICIT_MODEL, 16, 500), (EXPLICIT_MODEL, 16, 15)]
                loads += [("MoM", clients, tokens) for tokens in (15, 500) for clients in (1, 16)]
                for model, clients, tokens in loads:
                    row = asyncio.run(measure(url, model, 100, clients, tokens))
                    result["rows"][f"{model} {tokens}tok@c{clients}"] = {
                        k: round(v, 2) for k, v in row.items()
                    }
                print(json.dumps(result["rows"]), flush=True)
                result["memory"]["after_load"] = report(process.pid, "after load")
            if args.probe:
                base = url.rsplit("/v1/", 1)[0]
                for path, body in PROBES:
                    for attempt in ("first", "second"):
                        began = time.monotonic()
                        answer = httpx.post(base + path, json=body, timeout=300)
                        print(f"{path} {attempt}: {answer.status_code} in {time.monotonic() - began:.2f} s")
                result["memory"]["after_probe"] = report(process.pid, "after probe")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
