"""`svc-sr serve`'s start-up lines and stop: each deployment says when it is ready (a line that
stays, unlike the progress bar), and Envoy and the sidecar are stopped together."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from app.cli import serve as serve_module
from app.cli.gateway import Gateway
from app.common.supervisor import SupervisedProcess

# On SIGTERM: note the time, take 1 s to drain, note the time again, exit.
DRAINING_CHILD = """
import signal, sys, time
path = sys.argv[1]
def drain(*_):
    with open(path, "a") as fh:
        fh.write(f"term {time.time()}\\n")
    time.sleep(1.0)
    with open(path, "a") as fh:
        fh.write(f"exit {time.time()}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
open(path + ".up", "w").close()
signal.pause()
"""


@pytest.mark.slow
def test_each_deployment_gets_a_ready_line(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter(
        [
            {"Router": "UPDATING", "Embedding": "UPDATING"},
            {"Router": "UPDATING", "Embedding": "HEALTHY"},
            {"Router": "HEALTHY", "Embedding": "HEALTHY"},
        ]
    )
    done = threading.Event()

    def states() -> dict[str, str]:
        state = next(readings, None)
        if state is None:
            done.set()
            return {"Router": "HEALTHY", "Embedding": "HEALTHY"}
        return state

    monkeypatch.setattr(serve_module, "_safe_states", states)
    worker = threading.Thread(target=done.wait, args=(30,))
    worker.start()
    console = Console(record=True, width=200)
    serve_module._show_progress(worker, threading.Event(), console)
    lines = [line.strip() for line in console.export_text().splitlines() if "ready (" in line]
    assert [line.split(" ready")[0] for line in lines] == ["Embedding", "Router"]  # in order, once each


@pytest.mark.slow
def test_envoy_and_the_sidecar_stop_together(tmp_path: Path) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in ("envoy", "sidecar")}
    children = {
        name: SupervisedProcess(name, [sys.executable, "-c", DRAINING_CHILD, str(path)]).start()
        for name, path in logs.items()
    }
    for path in logs.values():  # both have installed their SIGTERM handler
        for _ in range(300):
            if Path(str(path) + ".up").exists():
                break
            threading.Event().wait(0.05)
    gateway = Gateway.__new__(Gateway)
    gateway.envoy, gateway.sidecar = children["envoy"], children["sidecar"]
    gateway.stop()
    events = {
        name: dict(line.split() for line in path.read_text().splitlines()) for name, path in logs.items()
    }
    assert all(set(e) == {"term", "exit"} for e in events.values()), events
    # Each was told to stop before the other had finished draining: the drains overlapped.
    assert float(events["sidecar"]["term"]) < float(events["envoy"]["exit"])
    assert float(events["envoy"]["term"]) < float(events["sidecar"]["exit"])
    assert gateway.envoy is None and gateway.sidecar is None


@pytest.mark.slow
def test_the_cli_imports_a_command_module_only_when_it_is_used() -> None:
    """`svc-sr stop` and `status` must not pay for the benchmark, config and KubeRay modules."""
    heavy = ["app.cli.benchmark_cmds", "app.cli.config_cmds", "app.cli.kuberay", "app.cli.ops_cmds"]
    probe = (
        "import sys, app.cli.main as m\n"
        f"print([n for n in {heavy!r} if n in sys.modules])\n"
        "import click\n"
        "assert m.cli.get_command(click.Context(m.cli), 'benchmark') is not None\n"
        f"print([n for n in {heavy!r} if n in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, after = out.stdout.splitlines()
    assert before == "[]"
    assert after == "['app.cli.benchmark_cmds']"


def test_every_lazy_command_resolves_with_its_help() -> None:
    import click

    from app.cli.main import cli

    def walk(group: click.Group, path: str) -> list[str]:
        names = []
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, f"{path} {name}"
            assert command.help or command.short_help, f"{path} {name} has no help"
            names.append(f"{path} {name}")
            if isinstance(command, click.Group):
                names += walk(command, f"{path} {name}")
        return names

    names = walk(cli, "svc-sr")
    for expected in (
        "svc-sr config validate",
        "svc-sr config apply",
        "svc-sr recipe apply",
        "svc-sr recipe delete",
        "svc-sr route",
        "svc-sr manifest",
        "svc-sr benchmark",
        "svc-sr completion",
        "svc-sr stop",
    ):
        assert expected in names


def test_exit_now_flushes_what_was_written_and_keeps_the_code(tmp_path: Path) -> None:
    probe = (
        "import sys, logging\n"
        "from app.common.process_exit import exit_now\n"
        f"logging.basicConfig(filename={str(tmp_path / 'log')!r}, level=logging.INFO)\n"
        "logging.getLogger('t').info('logged line')\n"
        "sys.stdout.write('buffered line')\n"
        "exit_now(7)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 7
    assert out.stdout == "buffered line"
    assert "logged line" in (tmp_path / "log").read_text()
