"""svc-sr beside LiteLLM's proxy, one run, same instant upstream: what the judgment costs.

Rows, each at 1 and 16 clients, short (~15 token) and ~500-token prompts, every prompt distinct:
- litellm:       LiteLLM's proxy in pass-through (one model, no routing, no guards), installed in a
                 scratch venv under .cache/bench/ by this script: never a product dependency
- svc-sr model:  `svc-sr serve` with the shipped configs/config.yaml, an explicit model (no signals)
- svc-sr MoM:    the same stack, model MoM: every signal of the shipped config evaluated
svc-sr runs as users run it (`svc-sr serve`: Ray, the graph, Envoy and the ext_proc sidecar), its
backends pointed at the instant upstream; requests go to the Ray HTTP door. After the load, the
stack's machine memory: the proportional set size (PSS: shared pages split between the processes
that map them) summed over `svc-sr serve` and every process under it.

    .venv/bin/python bench/bench_vs_litellm.py [--requests 200] [--json FILE]

Prints one JSON document: the rows (p50/p99 ms, req/s), the ratios the performance issue's targets
name (MoM and explicit-model req/s over LiteLLM's, MoM p50 over LiteLLM's), the CPU model and the
memory. docs/performance.md reads its figures from here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.common.ports import free_port  # noqa: E402
from bench.bench_all_signals import measure  # noqa: E402
from tests.fakes.configs import served_default  # noqa: E402
from tests.fakes.upstream import FakeUpstream  # noqa: E402

LITELLM_VERSION = "1.106.12"  # the newest whose proxy extra the registry resolves in full
LITELLM_VENV = ROOT / ".cache" / "bench" / f"litellm-{LITELLM_VERSION}"
EXPLICIT_MODEL = "gemma-general"  # a concrete model of configs/config.yaml
START_TIMEOUT_S = 600.0
SHAPES = ((15, 1), (15, 16), (500, 1), (500, 16))


def litellm_bin() -> Path:
    """LiteLLM's proxy in its own venv (its pins clash with ours); installed once, then reused."""
    binary = LITELLM_VENV / "bin" / "litellm"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        pip = [str(LITELLM_VENV / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, f"litellm[proxy]=={LITELLM_VERSION}"], check=True)
    return binary


def wait_until(url: str, process: subprocess.Popen[bytes], log: Path, ready: str | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited {process.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(url, timeout=5).status_code == 200 and (
                ready is None or ready in log.read_text(errors="replace")
            ):
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"not ready in {START_TIMEOUT_S:.0f} s:\n{log.read_text(errors='replace')[-4000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()  # SIGTERM: each server's clean shutdown
    try:
        process.wait(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()


@contextmanager
def litellm_proxy(upstream: FakeUpstream, work: Path) -> Iterator[str]:
    config = {
        "model_list": [
            {
                "model_name": EXPLICIT_MODEL,
                "litellm_params": {
                    "model": "openai/gemma-3-270m",
                    "api_base": upstream.base_url,
                    "api_key": "unused",
                },
            }
        ],
        "litellm_settings": {"telemetry": False, "drop_params": True},
    }
    config_path = work / "litellm.yaml"
    config_path.write_text(yaml.safe_dump(config))
    port, log = free_port(), work / "litellm.log"
    # No network at run time (the cost map packaged with LiteLLM, not GitHub's); no master key,
    # as svc-sr's laptop listener takes none: both doors do the same work for a key (none).
    env = os.environ | {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    command = [str(litellm_bin()), "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_until(f"http://127.0.0.1:{port}/health/liveliness", process, log)
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        stop(process)


@contextmanager
def svc_sr(
    upstream: FakeUpstream, work: Path, serve_config: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    document = served_default(upstream.host_url)
    document["global"]["services"]["observability"]["metrics"]["port"] = free_port()
    for listener in document["listeners"]:
        listener["port"] = free_port()
    config_path = work / "config.yaml"
    config_path.write_text(yaml.safe_dump(document))
    port, log = free_port(), work / "svc-sr.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    env |= {"SVC_SR_STATE_DIR": str(work / "run"), "SVC_SR_MANAGEMENT_STATE_DIR": str(work / "mgmt")}
    command = [str(Path(sys.executable).with_name("svc-sr")), "serve", "--config", str(config_path)]
    command += ["--port", str(port), "--no-dashboard"]
    command += ["--serve-config", str(serve_config)] if serve_config is not None else []
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_until(f"http://127.0.0.1:{port}/ready", process, log, ready="OpenAI-compatible endpoint")
        yield f"http://127.0.0.1:{port}/v1/chat/completions", process
    finally:
        stop(process)


# Processes of the stack by what they run (first match of the command line wins); Ray names
# its workers' processes ray::<actor class> (ray::ServeReplica:<app>:<deployment> for a replica).
ROLES = (
    ("svc-sr serve", "svc-sr serve (driver)"),
    ("deployments.extproc_sidecar", "ext_proc sidecar"),
    ("/envoy", "Envoy"),
    ("/haproxy", "HAProxy"),
    ("/gcs_server", "Ray GCS"),
    ("/raylet", "Ray raylet"),
    ("/dashboard.py", "Ray dashboard"),
    ("/log_monitor.py", "Ray log monitor"),
    ("/monitor.py", "Ray autoscaler monitor"),
)


def process_role(cmdline: list[str]) -> str:
    """What a process of the stack is, for the per-process split: a Serve replica by its
    deployment (its replicas counted together), Ray's actors and daemons by name."""
    title = " ".join(cmdline)
    actor = (
        title.split()[0].split(".")[0] if title.startswith("ray::") else ""
    )  # ray::Class.method while busy
    if actor.startswith("ray::ServeReplica:"):
        return actor.rsplit(":", 1)[-1]
    if actor:
        return actor.removeprefix("ray::")
    return next(
        (role for marker, role in ROLES if marker in title), Path(cmdline[0]).name if cmdline else "?"
    )


def stack_memory(root: int) -> dict[str, Any]:
    """PSS and RSS summed over process `root` and everything under it (Ray, the replicas, Envoy,
    the sidecar), in MiB: PSS is the machine memory the stack takes, RSS counts shared pages
    once per process that maps them. `by_process`: PSS and process count per role (a deployment's
    replicas together; process_role), largest first, so a cut can be aimed and runs compared."""
    top = psutil.Process(root)
    mib = 1024 * 1024
    pss = rss = count = 0
    by_role: dict[str, list[int]] = {}
    for process in [top, *top.children(recursive=True)]:
        try:
            info, role = process.memory_full_info(), process_role(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        pss, rss, count = pss + info.pss, rss + info.rss, count + 1
        entry = by_role.setdefault(role, [0, 0])
        entry[0], entry[1] = entry[0] + info.pss, entry[1] + 1
    ranked = sorted(by_role.items(), key=lambda item: -item[1][0])
    return {
        "pss_mib": round(pss / mib),
        "rss_mib": round(rss / mib),
        "processes": count,
        "by_process": {role: {"pss_mib": round(size / mib), "processes": n} for role, (size, n) in ranked},
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for tokens, clients in SHAPES:
        shape = f"{tokens}tok@c{clients}"
        lite, mom, model = rows["litellm"][shape], rows["svc-sr MoM"][shape], rows["svc-sr model"][shape]
        if clients == 1:
            out[f"{shape} MoM p50 / litellm p50"] = mom["p50_ms"] / lite["p50_ms"]
        else:
            out[f"{shape} MoM req/s / litellm"] = mom["rps"] / lite["rps"]
            out[f"{shape} explicit model req/s / litellm"] = model["rps"] / lite["rps"]
    return {k: round(v, 2) for k, v in out.items()}


def load(url: str, model: str, requests: int) -> dict[str, dict[str, float]]:
    asyncio.run(measure(url, model, 40, 4, 500))  # warm-up: pools, encoder shapes, replicas
    rows = {}
    for tokens, clients in SHAPES:
        total = requests if tokens < 100 else max(requests // 2, 50)
        result = asyncio.run(measure(url, model, total, clients, tokens))
        rows[f"{tokens}tok@c{clients}"] = {k: round(v, 2) for k, v in result.items()}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    rows: dict[str, dict[str, Any]] = {}
    with FakeUpstream(name="instant") as upstream, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with litellm_proxy(upstream, work) as url:
            rows["litellm"] = load(url, EXPLICIT_MODEL, args.requests)
        with svc_sr(upstream, work) as (url, process):
            ready_memory = stack_memory(process.pid)
            rows["svc-sr model"] = load(url, EXPLICIT_MODEL, args.requests)
            rows["svc-sr MoM"] = load(url, "MoM", args.requests)
            loaded_memory = stack_memory(process.pid)
    result = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "litellm": LITELLM_VERSION,
        "rows": rows,
        "ratios": ratios(rows),
        "svc_sr_memory": {"ready": ready_memory, "after_load": loaded_memory},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
