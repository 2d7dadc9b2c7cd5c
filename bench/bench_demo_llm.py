"""The demo LLM's decode speed by llama.cpp CPU variant (docs/local-llm.md).

node-llama-cpp ships llama.cpp built for every x86-64 variant and loads the best one this CPU
supports. This runs the demo server (app/local_llm/node/server.mjs) on the installed engine as
shipped (the dispatched variant) and on copies of it that keep one variant only: `haswell` (AVX2
+ FMA + F16C, what a portable `-DGGML_NATIVE=OFF -DGGML_AVX2=ON` build gives) and `x64` (the
SSE baseline of any x86-64). Each row: the server's start (until /v1/models answers), then
greedy 128-token completions of one prompt, the first discarded; tokens/s = completion tokens
over the request's wall time.

usage: python bench/bench_demo_llm.py [--threads 1 2] [--runs 5] [--variants dispatch haswell x64]
(`python -m app.local_llm install` first; needs the GGUF: make venv installs its packages)
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.common.ports import free_port  # noqa: E402
from app.local_llm import LocalLLMSettings  # noqa: E402
from app.local_llm.install import installed_modules  # noqa: E402
from app.local_llm.settings import SERVER_SCRIPT  # noqa: E402
from app.local_llm.supervisor import ensure_model, probe_models  # noqa: E402

PROMPT = "Once upon a time, in a small village by the sea, there lived"


def variant_copy(modules: Path, variant: str, into: Path) -> Path:
    """A copy of node_modules whose x64 package keeps one CPU variant (node resolves symlinks to
    the original files, so a copy it must be)."""
    target = into / "node_modules"
    shutil.copytree(modules, target, symlinks=True)
    bins = target / "@node-llama-cpp" / "linux-x64" / "bins" / "linux-x64"
    for lib in bins.glob("libggml-cpu-*.so"):
        if lib.name != f"libggml-cpu-{variant}.so":
            lib.unlink()
    return target


def complete(base: str) -> tuple[int, float]:
    body = json.dumps({"prompt": PROMPT, "max_tokens": 128, "temperature": 0}).encode()
    request = urllib.request.Request(
        f"{base}/completions", data=body, headers={"content-type": "application/json"}
    )
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.loads(response.read())
    return int(answer["usage"]["completion_tokens"]), time.perf_counter() - began


def run(modules: Path, model: Path, threads: int, runs: int) -> dict[str, object]:
    port = free_port()
    settings = LocalLLMSettings(cache_dir=Path(tempfile.gettempdir()), port=port)
    command = [settings.node, str(SERVER_SCRIPT), "--model", str(model), "--modules", str(modules)]
    command += ["--port", str(port), "--threads", str(threads)]
    began = time.perf_counter()
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while probe_models(settings, timeout=1.0) is None:
            if server.poll() is not None:
                raise RuntimeError(f"server exited: {server.stdout.read() if server.stdout else ''}")
            time.sleep(0.1)
        start_s = time.perf_counter() - began
        complete(settings.base_url)  # warm-up
        rates = []
        for _ in range(runs):
            tokens, seconds = complete(settings.base_url)
            rates.append(tokens / seconds)
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=30)
    variant = next(
        (line.split("variant: ")[1].split(";")[0] for line in out.splitlines() if "variant: " in line), "?"
    )
    return {
        "variant": variant,
        "threads": threads,
        "start_s": round(start_s, 1),
        "tokens_per_s_median": round(statistics.median(rates), 1),
        "tokens_per_s_min": round(min(rates), 1),
        "tokens_per_s_max": round(max(rates), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=["dispatch", "haswell", "x64"])
    args = parser.parse_args()
    settings = LocalLLMSettings.from_env()
    modules = installed_modules(settings)
    model = ensure_model(settings.model_path)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())  # fmt: skip
    print(f"# demo LLM decode speed; CPU: {cpu}; {platform.machine()}")
    print("| variant | threads | start s | tokens/s median (min-max) |")
    print("|---|---|---|---|")
    x64 = platform.machine().lower() in ("x86_64", "amd64")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants if x64 else ["dispatch"]:
            path = modules if name == "dispatch" else variant_copy(modules, name, Path(tmp) / name)
            for threads in args.threads:
                row = run(path, model, threads, args.runs)
                label = f"{name} ({row['variant']})" if name == "dispatch" else name
                print(f"| {label} | {threads} | {row['start_s']} | {row['tokens_per_s_median']} "
                      f"({row['tokens_per_s_min']}-{row['tokens_per_s_max']}) |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
