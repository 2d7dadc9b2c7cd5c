"""Soak: the svc-sr stack under steady load for a fixed time, and the memory of every process.

    .venv/bin/python bench/soak.py [--duration 600] [--warmup 90] [--json out.json]   (make soak)

The stack is what `svc-sr serve` runs, on this machine's loopback: a local Ray instance with
Serve's fast path (HAProxy, throughput-optimized handles), the graph shaped as
cluster/serve-config.yaml shapes it (two Ingress replicas), the semantic cache (memory) and the
metrics endpoint on, and Envoy with the ext_proc sidecar (app/cli/gateway.py). Upstream LLMs
are fake servers on 127.0.0.1 (tests/fakes/upstream.py) that take a few milliseconds to answer.

Load: closed-loop clients with no retries (tests/fakes/load.py): chat and streamed chat
through HAProxy, chat through Envoy. Prompts cycle over a fixed set, so the cache fills during
the warm-up and then answers some and misses others; every request evaluates the domain, PII,
jailbreak, keyword and embedding signals. The run stops by itself after --duration seconds.

The resident memory (VmRSS) of every process the run started (this process's descendants:
Ray's GCS, raylet, workers and replicas, Serve's HAProxy, Envoy, the sidecar) is read when the
warm-up ends and every --sample seconds after; the report gives each one's growth over the
measured period, the requests sent and every failure. Exit status 1 when a request failed, a
process crashed, or one of svc-sr's processes or Ray's workers grew by --max-growth percent (5)
or more (Ray's own daemons, the raylet, GCS, dashboard and monitors, are reported only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.common.ports import free_port
from tests.fakes.configs import any_of, learned_signals, priced_model  # noqa: E402
from tests.fakes.load import ChatLoad  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

TOPICS = ["derivatives", "the French revolution", "python decorators", "photosynthesis", "interest rates"]


def prompt(i: int) -> str:
    """300 distinct prompts, cycling: the cache holds them all after the warm-up."""
    n = i % 300
    return f"Question {n}: explain {TOPICS[n % len(TOPICS)]} to a student, in a few sentences (case {n})"


def soak_config(a: FakeUpstream, b: FakeUpstream, ports: dict[str, int]) -> dict[str, Any]:
    cache = {"enabled": True, "similarity_threshold": 0.97}
    return {
        "version": "v0.3",
        "listeners": [{"name": "http", "address": "127.0.0.1", "port": ports["listener"], "timeout": "300s"}],
        "providers": {
            "defaults": {"default_model": "general"},
            "models": [priced_model("general", a.host_url), priced_model("expert", b.host_url)],
        },
        "routing": {
            "signals": {
                "keywords": [
                    {"name": "math_words", "operator": "OR", "keywords": ["derivative", "integral"]}
                ],
                **learned_signals("code", 0.6),
            },
            "decisions": [
                {
                    "name": "expert",
                    "priority": 100,
                    "rules": any_of(("keyword", "math_words"), ("domain", "math"), ("embedding", "code")),
                    "modelRefs": [{"model": "expert"}],
                    "plugins": [{"type": "semantic-cache", "configuration": cache}],
                },
                {
                    "name": "guarded",
                    "priority": 50,
                    "rules": any_of(("pii", "any_pii"), ("jailbreak", "attack")),
                    "modelRefs": [{"model": "general"}],
                },
            ],
        },
        "global": {
            "stores": {"response_cache": dict(cache)},
            "services": {
                "management_api": {"port": ports["http"]},
                "observability": {"metrics": {"port": ports["metrics"]}},
                "ext_proc": {"port": ports["ext_proc"]},
                "envoy": {"admin_port": ports["admin"]},
            },
        },
    }


# ----------------------------------------------------------------------------- processes


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process below `root` (from /proc)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        names[int(entry)] = cmdline
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = names[pid]
                frontier.append(pid)
    return found


def rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return 0  # a zombie


def label(cmdline: str) -> str:
    """A short name: Ray's process title (ray::ServeReplica:svc-sr:Router), or the program."""
    if cmdline.startswith("ray::"):
        return cmdline.split()[0]
    parts = cmdline.split()
    if "-m" in parts:
        return parts[parts.index("-m") + 1]
    program = Path(parts[0]).name if parts else "?"
    if not program.startswith("python"):
        return program
    script = next((Path(p).name for p in parts[1:] if p.endswith(".py")), "")
    return f"{program} {script}".strip()


# Ray's own daemons: reported, but the growth target is for svc-sr's processes and Ray's workers
# (every replica and actor, HAProxy, Envoy, the sidecar).
RAY_DAEMONS = frozenset(
    {
        "raylet",
        "gcs_server",
        "python dashboard.py",
        "python monitor.py",
        "python log_monitor.py",
        "ray::DashboardAgent",
        "ray::RuntimeEnvAgent",
    }
)


def sample(pids: dict[int, str]) -> dict[int, int]:
    return {pid: kib for pid in pids if (kib := rss_kib(pid))}


# ----------------------------------------------------------------------------- run


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from deployments.serve_env import apply_fast_path_env

    apply_fast_path_env()  # before Ray or Serve is imported, as `svc-sr serve` does
    import ray
    from ray import serve

    from app.cli.gateway import Gateway
    from app.config.loader import parse_config
    from deployments.graph import GraphArgs, build_app

    ports = {name: free_port() for name in ("http", "metrics", "listener", "ext_proc", "admin")}
    with (
        FakeUpstream(name="general", delay_s=args.upstream_delay) as a,
        FakeUpstream(name="expert", delay_s=args.upstream_delay) as b,
        tempfile.TemporaryDirectory() as tmp,
    ):
        config_path = Path(tmp, "soak.yaml")
        document = soak_config(a, b, ports)
        config_path.write_text(yaml.safe_dump(document))
        os.environ["SVC_SR_MANAGEMENT_STATE_DIR"] = str(Path(tmp, "state"))
        ray.init(num_cpus=6, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        gateway = None
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": ports["http"]})
            serve.run(
                build_app(
                    GraphArgs(config_path=str(config_path), deployments={"Ingress": {"num_replicas": 2}})
                ),
                name="svc-sr",
                route_prefix="/",
            )
            gateway = Gateway(
                config_path,
                parse_config(document).config,
                Path(tmp),
                ray.get_runtime_context().gcs_address,
                "svc-sr",
                ports["http"],
            )
            gateway.start()
            return soak(args, f"http://127.0.0.1:{ports['http']}", gateway.url)
        finally:
            if gateway is not None:
                gateway.stop()
            serve.shutdown()
            ray.shutdown()


@dataclass
class Memory:
    """What was read of the processes: their command lines when the warm-up ended, VmRSS then
    (KiB), at each sample and at the end, and the processes alive at the end."""

    processes: dict[int, str]
    baseline: dict[int, int]
    samples: list[dict[str, int]] = field(default_factory=list)
    final: dict[int, int] = field(default_factory=dict)
    at_end: dict[int, str] = field(default_factory=dict)


def soak(args: argparse.Namespace, serve_url: str, envoy_url: str) -> dict[str, Any]:
    path = "/v1/chat/completions"
    loads = {
        "haproxy": ChatLoad(serve_url + path, workers=3, stream_workers=1, prompt=prompt),
        "envoy": ChatLoad(envoy_url + path, workers=1, prompt=prompt),
    }
    started = time.monotonic()
    for load in loads.values():
        load.start()
    time.sleep(args.warmup)
    processes = descendants(os.getpid())
    memory = Memory(processes, sample(processes))
    measured_from = time.monotonic()
    answered_at_baseline = sum(load.answered() for load in loads.values())
    while (left := started + args.duration - time.monotonic()) > 0:
        time.sleep(min(args.sample, left))
        memory.samples.append({"t_s": round(time.monotonic() - measured_from), **sample(processes)})
    for load in loads.values():
        load.stop()
    memory.final, memory.at_end = sample(processes), descendants(os.getpid())
    result = report(loads, memory, time.monotonic() - started)
    result["warmup_s"] = args.warmup
    result["requests_measured"] = result["requests"] - answered_at_baseline
    return result


def report(loads: dict[str, ChatLoad], memory: Memory, elapsed: float) -> dict[str, Any]:
    rows = []
    for pid, before in sorted(memory.baseline.items(), key=lambda item: -item[1]):
        after = memory.final.get(pid)
        peak = max([before, *(s.get(pid, 0) for s in memory.samples)])
        rows.append(
            {
                "pid": pid,
                "process": label(memory.processes[pid]),
                "ray_daemon": label(memory.processes[pid]) in RAY_DAEMONS,
                "rss_start_mib": round(before / 1024, 1),
                "rss_end_mib": None if after is None else round(after / 1024, 1),
                "rss_peak_mib": round(peak / 1024, 1),
                "growth_pct": None if after is None else round(100 * (after - before) / before, 2),
            }
        )
    failures = [o for load in loads.values() for o in load.failures()]
    requests = sum(load.answered() for load in loads.values())
    total_after = sum(memory.final.get(p, 0) for p in memory.baseline)
    return {
        "duration_s": round(elapsed, 1),
        "requests": requests,
        "requests_per_s": round(requests / elapsed, 1),
        "by_front_door": {name: load.answered() for name, load in loads.items()},
        "failures": len(failures),
        "failure_samples": [o.describe() for o in failures[:10]],
        "processes": rows,
        "total_rss_start_mib": round(sum(memory.baseline.values()) / 1024, 1),
        "total_rss_end_mib": round(total_after / 1024, 1),
        "max_growth_pct": _max_growth(r for r in rows if not r["ray_daemon"]),
        "ray_daemons_max_growth_pct": _max_growth(r for r in rows if r["ray_daemon"]),
        "processes_gone": sorted(
            label(memory.processes[p]) for p in memory.baseline if p not in memory.final
        ),
        "processes_new": sorted(label(c) for p, c in memory.at_end.items() if p not in memory.processes),
        "samples_mib": [
            {k: v if k == "t_s" else round(v / 1024, 1) for k, v in s.items()} for s in memory.samples
        ],
    }


def _max_growth(rows: Iterable[dict[str, Any]]) -> float:
    return max((r["growth_pct"] for r in rows if r["growth_pct"] is not None), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load, warm-up included")
    parser.add_argument("--warmup", type=float, default=90.0, help="seconds before the memory baseline")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between memory samples")
    parser.add_argument(
        "--upstream-delay", type=float, default=0.02, help="each fake answer's delay, seconds"
    )
    parser.add_argument("--max-growth", type=float, default=5.0, help="percent: a process growing more fails")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    if args.warmup >= args.duration:
        parser.error("--warmup must be shorter than --duration")
    result = run(args)
    text = json.dumps({k: v for k, v in result.items() if k != "samples_mib"}, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    # Ray stops idle workers it prestarted on its own; any other process gone is a crash.
    crashed = [name for name in result["processes_gone"] if name != "ray::IDLE"]
    failed = result["failures"] > 0 or result["max_growth_pct"] >= args.max_growth or crashed
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
