"""The demo LLM engine's install rules (app/local_llm/install.py): the cache key covers every input
that changes what is installed, an install is complete or absent, a reinstall replaces it whole.
npm and node are stand-ins here (scripts that record their calls); the real install is exercised
by tests/integration/test_demo_llm.py."""

from __future__ import annotations

import json
import platform
import shutil
import stat
import sys
from pathlib import Path

import pytest

from app.local_llm import LocalLLMError, LocalLLMSettings, install

FAKE_NODE = "#!/bin/sh\necho {version}\n"
# Records its arguments; `ci` writes node_modules (a package.json per package), `install` adds one.
FAKE_NPM = """#!{python}
import json, os, sys
from pathlib import Path
calls = Path(os.environ["FAKE_NPM_CALLS"])
calls.write_text(calls.read_text() + json.dumps(sys.argv[1:]) + "\\n" if calls.exists() else json.dumps(sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_NPM_FAIL") == sys.argv[1]:
    print("npm ERR! 404 Not Found", file=sys.stderr)
    sys.exit(1)
pkg = Path("node_modules") / ("node-llama-cpp" if sys.argv[1] == "ci" else sys.argv[-1].rsplit("@", 1)[0])
pkg.mkdir(parents=True, exist_ok=True)
(pkg / "package.json").write_text("{{}}")
"""


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    """A copy of the real manifests, so a test can change them."""
    engine_dir = tmp_path / "engine"
    engine_dir.mkdir()
    for name in install.MANIFESTS:
        shutil.copyfile(install.ENGINE_DIR / name, engine_dir / name)
    return engine_dir


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalLLMSettings:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node = _executable(bin_dir / "node", FAKE_NODE.format(version="v20.20.2"))
    _executable(bin_dir / "npm", FAKE_NPM.format(python=sys.executable))
    monkeypatch.setenv("FAKE_NPM_CALLS", str(tmp_path / "npm-calls"))
    return LocalLLMSettings(cache_dir=tmp_path / "cache", node=str(node))


def npm_calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "npm-calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_key_changes_with_every_input_and_only_then(
    tools: LocalLLMSettings, engine: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    base = install.install_key(tools.node, engine)
    assert install.install_key(tools.node, engine) == base  # same inputs, same directory

    lock = engine / "package-lock.json"
    lock.write_text(lock.read_text().replace('"node-llama-cpp": "3.21.1"', '"node-llama-cpp": "3.21.2"'))
    assert install.install_key(tools.node, engine).digest != base.digest
    shutil.copyfile(install.ENGINE_DIR / "package-lock.json", lock)

    (engine / "package.json").write_text((engine / "package.json").read_text() + "\n")
    assert install.install_key(tools.node, engine).digest != base.digest
    shutil.copyfile(install.ENGINE_DIR / "package.json", engine / "package.json")
    assert install.install_key(tools.node, engine) == base

    newer = _executable(tmp_path / "node22", FAKE_NODE.format(version="v22.1.0"))
    assert install.install_key(str(newer), engine).digest != base.digest

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    arm = install.install_key(tools.node, engine)
    assert arm.digest != base.digest and install.platform_package(arm, engine).startswith(
        "@node-llama-cpp/linux-arm64@"
    )
    monkeypatch.setattr(platform, "libc_ver", lambda: ("musl", "1.2"))
    assert install.install_key(tools.node, engine).digest != arm.digest


def test_the_platform_package_version_is_the_locks(tools: LocalLLMSettings, engine: Path) -> None:
    key = install.install_key(tools.node, engine)
    lock = json.loads((engine / "package-lock.json").read_text())
    name, version = install.platform_package(key, engine).rsplit("@", 1)
    assert lock["packages"][f"node_modules/{name}"]["version"] == version
    assert lock["packages"]["node_modules/node-llama-cpp"]["version"] == version  # one release of both


def test_node_missing_or_too_old_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LocalLLMError, match="Node.js >= 20"):
        install.node_version(str(tmp_path / "no-node"))
    old = _executable(tmp_path / "node18", FAKE_NODE.format(version="v18.19.0"))
    with pytest.raises(LocalLLMError, match="v18.19.0 is too old"):
        install.node_version(str(old))


def test_an_install_happens_once_per_key(tools: LocalLLMSettings, engine: Path, tmp_path: Path) -> None:
    modules = install.install(tools, engine_dir=engine)
    assert (modules / "node-llama-cpp" / "package.json").is_file()
    calls = npm_calls(tmp_path)
    assert [c[0] for c in calls] == ["ci", "install"]
    assert "--omit=optional" in calls[0] and "--ignore-scripts" in calls[0]  # only this CPU's binaries
    assert calls[1][-1] == install.platform_package(install.install_key(tools.node, engine), engine)
    record = json.loads((modules.parent / install.COMPLETE).read_text())
    assert record["package"] == calls[1][-1]

    assert install.install(tools, engine_dir=engine) == modules
    assert len(npm_calls(tmp_path)) == 2  # complete install under this key: nothing runs
    assert [p.name for p in install.install_root(tools).iterdir()] == [modules.parent.name]


def test_a_reinstall_replaces_the_install_whole(
    tools: LocalLLMSettings, engine: Path, tmp_path: Path
) -> None:
    modules = install.install(tools, engine_dir=engine)
    stale = modules / "left-from-before"
    stale.mkdir()
    again = install.install(tools, reinstall=True, engine_dir=engine)
    assert again == modules and not stale.exists()
    assert len(npm_calls(tmp_path)) == 4
    assert [p.name for p in install.install_root(tools).iterdir()] == [modules.parent.name]


def test_a_changed_key_installs_anew_and_drops_the_old(
    tools: LocalLLMSettings, engine: Path, tmp_path: Path
) -> None:
    old = install.install(tools, engine_dir=engine)
    (engine / "package.json").write_text((engine / "package.json").read_text() + "\n")
    new = install.install(tools, engine_dir=engine)
    assert new != old and new.is_dir() and not old.parent.exists()
    assert len(npm_calls(tmp_path)) == 4


@pytest.mark.parametrize("failing", ["ci", "install"])
def test_a_failed_install_leaves_nothing_that_looks_installed(
    tools: LocalLLMSettings, engine: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    monkeypatch.setenv("FAKE_NPM_FAIL", failing)
    with pytest.raises(LocalLLMError, match="404 Not Found"):
        install.install(tools, engine_dir=engine)
    assert list(install.install_root(tools).iterdir()) == []  # no build directory, no install
    with pytest.raises(LocalLLMError, match="not installed"):
        install.installed_modules(tools)


def test_a_failed_reinstall_keeps_the_working_install(
    tools: LocalLLMSettings, engine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modules = install.install(tools, engine_dir=engine)
    monkeypatch.setenv("FAKE_NPM_FAIL", "install")
    with pytest.raises(LocalLLMError):
        install.install(tools, reinstall=True, engine_dir=engine)
    assert (modules.parent / install.COMPLETE).is_file() and (modules / "node-llama-cpp").is_dir()
