"""`ray up`'s node setup, run for real without a cloud: the setup commands of
cluster/ray-cluster.yaml executed in a scratch venv the way a node runs them.

A node gets the checkout at `~/svc-sr` (file_mounts) and runs `setup_commands`, then
`head_setup_commands` or its type's `worker_setup_commands`, in a shell in its home directory.
Here HOME is a temp dir holding a copy of the checkout (the files git tracks plus the untracked
ones it does not ignore: what the upload carries, without venvs and caches), a fresh
`python -m venv` leads PATH (on a node `pip` and `python` are the image's), and each command
runs through `bash -c` as written. This machine's user pip configuration (its registry mirror)
is copied into that HOME so pip resolves where `make venv` does; wheels pip downloads are
cached in the checkout's .cache/pip.

One substitution, and only when needed: the CPU index the head and the CPU workers name
(`--index-url https://download.pytorch.org/whl/cpu`) cannot be reached from this project's
machines (its name does not resolve; of the registries only PyPI answers). Run as written, pip
spends about 100 s retrying it, package by package, and then succeeds only because the
configured find-links ship the torch-2.13.0+cpu wheel. So when that index does not answer, the
option is dropped and the same pin resolves through the configured mirror, whose 2.13.0 is the
+cpu build; the checks below still require the CPU build. Where the index answers, the
commands run exactly as written.

The head's commands are run for real (the CPU workers run the same ones less boto3, which the
recipe test checks). The GPU workers' torch pin is resolved against PyPI alone, metadata only,
to show it is the CUDA build the file says it is; installing it here would prove nothing (the
mirror would hand over the CPU wheel) and would download gigabytes.

Measured on the 2-core machine, CPU index dropped, two runs: the head's setup 79 and 105 s
(venv and copy 3 s, torch 15 s, `pip install -e ~/svc-sr[train]` 56 and 81 s, the int8 encoder
2 s, boto3 3 s), the whole file 98 and 125 s; the scratch venv (2.8 GB) is removed afterwards.
`make test-cluster` runs it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from app.common.ports import free_port
from tests.fakes.processes import kill_processes_naming

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_FILE = ROOT / "cluster" / "ray-cluster.yaml"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI = "https://pypi.org/simple/"
COMMAND_TIMEOUT_S = 1200
# Extras of `make venv` that a serving node does not need: tests and linters, and the laptop's
# demo LLM weights (`make run`'s model; a cluster serves its models with vLLM).
LOCAL_ONLY_EXTRAS = {"dev", "demo"}
# The scratch Ray runs without the token auth Ray 2.60 turns on (a real cluster ships one token).
NO_AUTH = {"RAY_AUTH_MODE": "disabled"}


def cluster_file() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CLUSTER_FILE.read_text())
    return loaded


def node_setup(cfg: dict[str, Any]) -> dict[str, list[str]]:
    """Node type -> the setup commands a node of that type runs, in order (Ray's merge: the global
    `setup_commands` first; a node type's `worker_setup_commands` replace the global list)."""
    common = list(cfg.get("setup_commands") or [])
    nodes = {cfg["head_node_type"]: common + list(cfg.get("head_setup_commands") or [])}
    for name, node_type in cfg["available_node_types"].items():
        if name != cfg["head_node_type"]:
            own = node_type.get("worker_setup_commands", cfg.get("worker_setup_commands") or [])
            nodes[name] = common + list(own)
    return nodes


@dataclass
class PipInstall:
    requirements: list[str]
    editable: list[str]
    index_url: str | None


def pip_install(command: str) -> PipInstall | None:
    """The parts of a `pip install` command line that decide what gets installed."""
    words = shlex.split(command, comments=True)
    if words[:2] != ["pip", "install"]:
        return None
    parsed = PipInstall([], [], None)
    rest = iter(words[2:])
    for word in rest:
        if word in ("-e", "--editable"):
            parsed.editable.append(next(rest))
        elif word in ("-i", "--index-url"):
            parsed.index_url = next(rest)
        elif not word.startswith("-"):
            parsed.requirements.append(word)
    return parsed


def makefile_recipe() -> tuple[str, set[str]]:
    """(torch pin, extras) of the Makefile's one install command."""
    found = re.search(
        r"\$\(PIP\) install .*'torch==([^']+)'.* -e '\.\[([^\]]*)\]'", (ROOT / "Makefile").read_text()
    )
    assert found, "the Makefile's install command changed shape: update this test"
    return found[1], set(found[2].split(","))


def reachable(url: str) -> bool:
    try:
        socket.create_connection((urlsplit(url).hostname or "", 443), timeout=5).close()
    except OSError:
        return False
    return True


def test_every_node_installs_the_makefile_recipe() -> None:
    """Each node pins torch like the Makefile, before svc-sr (so svc-sr's own pin finds it
    satisfied and never pulls a second build), then installs the uploaded checkout editable with
    the Makefile's extras less the local-only ones (dev tools, the demo LLM); CPU nodes take torch
    from the CPU index, GPU nodes PyPI's default (CUDA) build. The CPU workers' commands are the
    head's less boto3."""
    cfg = cluster_file()
    torch_pin, make_extras = makefile_recipe()
    (mount,) = [target for target in cfg["file_mounts"] if "svc-sr" in target]
    wanted_editable = f"{mount}[{','.join(sorted(make_extras - LOCAL_ONLY_EXTRAS))}]"
    nodes = node_setup(cfg)
    for name, commands in nodes.items():
        installs = [p for p in map(pip_install, commands) if p]
        torch_at = [i for i, p in enumerate(installs) if f"torch=={torch_pin}" in p.requirements]
        svc_sr_at = [i for i, p in enumerate(installs) if wanted_editable in p.editable]
        assert len(torch_at) == 1 and len(svc_sr_at) == 1, (name, commands)
        assert torch_at[0] < svc_sr_at[0], (name, commands)
        unpinned = [r for p in installs for r in p.requirements if re.match(r"torch\b(?!==)", r)]
        assert unpinned == [], (name, unpinned)
        torch_index = installs[torch_at[0]].index_url
        assert torch_index == (None if name == "gpu_worker" else CPU_INDEX), (name, torch_index)
    head = nodes[cfg["head_node_type"]]
    assert [c for c in head if "boto3" not in c] == nodes["cpu_worker"]


def test_the_gpu_workers_torch_is_the_cuda_build_on_pypi() -> None:
    """The GPU workers' torch command resolved against PyPI alone (no mirror, no find-links),
    metadata only: the wheel it picks depends on the CUDA runtime packages."""
    if not reachable(PYPI):
        pytest.skip(f"{PYPI} is not reachable from this machine")
    # The main environment's torch (the vLLM venv's own pin rides on scripts/vllm-venv.sh's line).
    (command,) = [
        c for c in node_setup(cluster_file())["gpu_worker"] if c.startswith("pip install") and "torch" in c
    ]
    parsed = pip_install(command)
    assert parsed is not None and parsed.index_url is None
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1"}
    resolved = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps"]
        + ["--quiet", "--report", "-", *parsed.requirements],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    (torch,) = json.loads(resolved.stdout)["install"]
    assert "+" not in torch["metadata"]["version"]  # not a +cpu local build
    assert any(d.startswith("nvidia-") for d in torch["metadata"].get("requires_dist", []))


@dataclass
class Node:
    """A scratch stand-in for one node after its setup commands: its HOME and its venv."""

    home: Path
    venv: Path
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def run(
        self,
        *args: str,
        cwd: Path | None = None,
        timeout: float = 300,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        env = self.env | (extra_env or {})
        return subprocess.run(
            list(args), cwd=cwd or self.home, env=env, capture_output=True, text=True, timeout=timeout
        )

    def python(self, code: str, extra_env: dict[str, str] | None = None) -> str:
        done = self.run(str(self.venv / "bin" / "python"), "-c", code, extra_env=extra_env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


def copy_checkout(destination: Path) -> None:
    """What the upload carries: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for relative in filter(None, listed.split("\0")):
        source = ROOT / relative
        if source.is_file():  # a tracked file deleted in the working tree is not uploaded
            (destination / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / relative)


def copy_user_pip_config(home: Path) -> None:
    real_home = Path.home()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or real_home / ".config")
    for source, target in (
        (config_home / "pip" / "pip.conf", home / ".config" / "pip" / "pip.conf"),
        (real_home / ".pip" / "pip.conf", home / ".pip" / "pip.conf"),
    ):
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def node_env(home: Path, venv: Path) -> dict[str, str]:
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in dropped and not k.startswith(("RAY_", "SVC_SR_", "PIP_CACHE_DIR"))
    }
    return env | {
        "HOME": str(home),
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
        "PIP_CACHE_DIR": str(ROOT / ".cache" / "pip"),
        # No .pyc for the 28k installed modules (a minute of one core): `make test` runs this setup
        # beside the unit tests, and what is checked is what gets installed, not its bytecode.
        # "0" is pip's spelling of --no-compile here: a store_false option read from the
        # environment takes the value itself (PIP_NO_COMPILE=1 leaves compiling on; checked).
        "PIP_NO_COMPILE": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def as_run_here(command: str, cpu_index_reachable: bool) -> str:
    if cpu_index_reachable:
        return command
    return re.sub(rf"\s--index-url\s+{re.escape(CPU_INDEX)}(?=\s)", "", command)


@pytest.fixture(scope="module")
def head_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    started = time.monotonic()
    base = tmp_path_factory.mktemp("ray-up")
    try:
        home, venv = base / "home", base / "venv"
        (home / "svc-sr").mkdir(parents=True)
        copy_checkout(home / "svc-sr")
        copy_user_pip_config(home)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        node = Node(home, venv, node_env(home, venv))
        node.timings["venv and copy"] = time.monotonic() - started
        cpu_index_reachable = reachable(CPU_INDEX)
        cfg = cluster_file()
        for command in node_setup(cfg)[cfg["head_node_type"]]:
            began = time.monotonic()
            done = node.run(
                "bash", "-c", as_run_here(command, cpu_index_reachable), timeout=COMMAND_TIMEOUT_S
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            node.timings[command.split("#")[0].strip()] = time.monotonic() - began
        node.timings["total"] = time.monotonic() - started
        print(f"\nhead setup (CPU index reachable: {cpu_index_reachable}):")
        for step, seconds in node.timings.items():
            print(f"  {seconds:6.1f} s  {step}")
        yield node
    finally:
        shutil.rmtree(base, ignore_errors=True)  # 2.8 GB; pytest would keep three runs' worth


def test_head_setup_installs_the_cpu_torch_and_the_main_venvs_ray(head_node: Node) -> None:
    torch_pin, _ = makefile_recipe()
    found = json.loads(
        head_node.python(
            "import json, boto3, ray, torch; print(json.dumps({'torch': torch.__version__,"
            " 'cuda': torch.version.cuda, 'ray': ray.__version__, 'boto3': boto3.__version__}))"
        )
    )
    assert found["torch"].split("+")[0] == torch_pin and found["cuda"] is None, found
    assert found["ray"] == importlib.metadata.version("ray"), found
    check = head_node.run(str(head_node.venv / "bin" / "pip"), "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_svc_sr_runs_from_the_uploaded_checkout(head_node: Node) -> None:
    for cli in ("svc-sr", "svc-srun"):
        done = head_node.run(str(head_node.venv / "bin" / cli), "--help")
        assert done.returncode == 0 and "Usage:" in done.stdout, done.stdout + done.stderr
    # From HOME, not the checkout: the editable install resolves the package, and to the upload.
    where = head_node.python(
        "from deployments.graph import build_app; import deployments; print(deployments.__file__)"
    )
    assert Path(where.strip()).is_relative_to(head_node.home / "svc-sr")


def test_the_setup_built_the_int8_encoder_in_the_nodes_cache(head_node: Node) -> None:
    built = list((head_node.home / ".cache" / "svc-sr" / "models").glob("*.onnx"))
    assert built, "the setup's encoder step left no int8 model in ~/.cache/svc-sr/models"


def test_the_native_engine_loads_as_the_gpu_replicas_run_it(head_node: Node) -> None:
    """The `native` engine (torch + transformers + the fp32 MiniLM package) is what model
    replicas run on CUDA; the same code on CPU shows the node's install carries all of it."""
    shape = head_node.python(
        "from app.runtime.native import NativeMiniLMEncoder;"
        "print(NativeMiniLMEncoder(device='cpu').encode(['a ray up node']).shape)"
    )
    assert shape.strip() == "(1, 384)"


@pytest.fixture
def scratch_ray(head_node: Node) -> Iterator[str]:
    """`ray start --head` from the scratch venv in ~/svc-sr, as head_start_ray_commands does;
    stopped by killing exactly its processes (`ray stop` would stop every Ray on the machine)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="ru", dir="/tmp"))  # short: Ray's socket paths
    port = free_port()
    try:
        start = head_node.run(
            str(head_node.venv / "bin" / "ray"), "start", "--head",
            "--port", str(port), "--node-ip-address", "127.0.0.1",
            "--num-cpus", "1", "--include-dashboard", "false",
            "--temp-dir", str(temp_dir), "--disable-usage-stats",
            cwd=head_node.home / "svc-sr", timeout=180, extra_env=NO_AUTH,
        )  # fmt: skip
        assert start.returncode == 0, start.stdout + start.stderr
        yield f"127.0.0.1:{port}"
    finally:
        kill_processes_naming(str(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.integration  # starts Ray
def test_a_ray_worker_on_the_node_imports_svc_sr(head_node: Node, scratch_ray: str) -> None:
    answer = head_node.python(
        f"import ray; ray.init(address={scratch_ray!r}, log_to_driver=False)\n"
        "@ray.remote\n"
        "def probe():\n"
        "    import deployments.graph, torch\n"
        "    return deployments.graph.__file__, torch.version.cuda\n"
        "print(ray.get(probe.remote(), timeout=120))",
        extra_env=NO_AUTH,
    )
    assert str(head_node.home / "svc-sr" / "deployments" / "graph.py") in answer
    assert answer.strip().endswith("None)")
