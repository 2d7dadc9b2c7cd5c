"""How long `svc-sr stop` takes, as a user times it: from typing the command to its return,
with the default config's whole stack up (the graph, Envoy and the ext_proc sidecar).

Each round starts `svc-sr serve` (its own state directory and port), waits until it is ready,
optionally keeps a few requests in flight, then times `svc-sr stop` and checks that nothing
answers on the port afterwards. Prints one JSON line per round and a summary.

    .venv/bin/python bench/bench_stop.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SVC_SR = str(Path(sys.executable).with_name("svc-sr"))
sys.path.insert(0, str(ROOT))

from bench.latency import percentile  # noqa: E402


def _ready(serve: subprocess.Popen[bytes], base: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"svc-sr serve exited with {serve.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if (
                httpx.get(f"{base}/ready", timeout=5).status_code == 200
                and "OpenAI-compatible" in log.read_text()
            ):
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise SystemExit(f"svc-sr serve not ready in {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


def _answers(base: str) -> bool:
    try:
        httpx.get(f"{base}/health", timeout=2)
    except httpx.HTTPError:
        return False
    return True


def _load(base: str, stop: threading.Event) -> None:
    """Requests back to back until the stack stops (their upstream is absent: each is answered
    with the routed error, which still walks the whole graph)."""
    body = {"model": "MoM", "messages": [{"role": "user", "content": "what is an integral?"}]}
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            try:
                client.post(f"{base}/v1/chat/completions", json=body)
            except httpx.HTTPError:
                return


def one_round(config: Path, port: int, work: Path, in_flight: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    env |= {"SVC_SR_STATE_DIR": str(work / "run"), "SVC_SR_MANAGEMENT_STATE_DIR": str(work / "management")}
    log = work / "serve.log"
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        serve = subprocess.Popen(
            [SVC_SR, "serve", "--config", str(config), "--port", str(port), "--no-dashboard"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _ready(serve, base, log, 600)
        time.sleep(3)  # the stack settles (first metrics pushes, cache health checks)
        stop_load = threading.Event()
        clients = [
            threading.Thread(target=_load, args=(base, stop_load), daemon=True) for _ in range(in_flight)
        ]
        for client in clients:
            client.start()
        time.sleep(1 if in_flight else 0)
        began = time.monotonic()
        done = subprocess.run(
            [SVC_SR, "stop"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        took = time.monotonic() - began
        stop_load.set()
        if done.returncode != 0:
            raise SystemExit(f"svc-sr stop failed: {done.stdout}{done.stderr}")
        serve.wait(timeout=30)
        return {"stop_s": round(took, 3), "still_answering": float(_answers(base))}
    finally:
        if serve.poll() is None:
            serve.terminate()
            serve.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "config.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18556)
    parser.add_argument("--in-flight", type=int, default=0, help="clients sending requests while it stops")
    args = parser.parse_args()
    rounds = []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="svcsr-bench-stop-") as work:
            result = one_round(args.config, args.port, Path(work), args.in_flight)
        print(json.dumps({"round": n + 1, "in_flight": args.in_flight, **result}), flush=True)
        rounds.append(result)
    times = [r["stop_s"] for r in rounds]
    summary = {
        "svc_sr_stop_s_median": round(statistics.median(times), 3),
        "svc_sr_stop_s_max": round(max(times), 3),
        "svc_sr_stop_s_p99": round(percentile(times, 99), 3),
        "rounds": len(times),
        "in_flight": args.in_flight,
        "still_answering_after_stop": int(sum(r["still_answering"] for r in rounds)),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
