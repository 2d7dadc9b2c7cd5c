"""notebooks/ run top to bottom in `make test` (issue 18), each in its own Jupyter kernel.

The quickstart and cluster notebooks run against this session's stack (conftest.py: the
svc-sr graph on a local Ray instance, fake upstreams on 127.0.0.1); the routing-quality
notebook benchmarks a small sample of ../shared/data/mmlu-pro. The addresses reach the
notebooks as the environment variables their first cell reads (defaults: `make run`'s
router). Every cell asserts what it shows, so a notebook that no longer works fails here.
Committed notebooks carry no outputs: tests/unit/structure/test_notebooks_clean.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
SHARED_DATASET = ROOT.parent / "shared" / "data" / "mmlu-pro"
CELL_TIMEOUT_S = 180  # any one cell (the quickstart waits up to 120 s for a configuration change)
KERNEL_START_TIMEOUT_S = 120


def run_notebook(name: str, env: dict[str, str], keep: Path) -> nbformat.NotebookNode:
    """Execute notebooks/NAME in a fresh python3 kernel of this interpreter (the project's
    .venv: no kernelspec installed elsewhere on the machine is consulted) with `env` added to
    the environment, working directory notebooks/. A failing cell raises CellExecutionError
    with the cell's traceback; the executed copy, outputs and all, is written to `keep`."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    # kernel_dirs=[]: only the native kernel of the running interpreter, never a user's spec
    kernels = KernelSpecManager(kernel_dirs=[])
    manager = KernelManager(kernel_name="python3", kernel_spec_manager=kernels)
    assert Path(manager.kernel_spec.argv[0]).resolve() == Path(sys.executable).resolve()
    client = NotebookClient(
        notebook,
        km=manager,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=KERNEL_START_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    try:
        client.execute(env={**os.environ, **env})
    finally:
        nbformat.write(notebook, keep / name)
    return notebook


def outputs_of(notebook: nbformat.NotebookNode) -> list[dict]:
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]


def _config_etag_and_version(base_url: str) -> tuple[str, int]:
    response = httpx.get(f"{base_url}/api/v1/config", timeout=10)
    return response.headers["etag"], int(response.headers["x-svc-config-version"])


def _restore_config(base_url: str, etag: str, version: int) -> None:
    """Roll the session's router back to `version` unless it already serves that document
    (the notebook does so itself; this covers a notebook stopped half way, whose jailbreak
    guard must not stay on for the session's later tests). Then wait until Serve reports the
    application settled, so the next test finds every deployment HEALTHY."""
    from ray import serve

    current, _ = _config_etag_and_version(base_url)
    if current != etag:
        response = httpx.post(
            f"{base_url}/api/v1/config/rollback",
            json={"config_version": version},
            headers={"if-match": current},
            timeout=180,
        )
        assert response.status_code in (200, 202), response.text
    deadline = time.monotonic() + 300
    while not _settled(base_url, etag, serve.status().applications["svc-sr"]):
        assert time.monotonic() < deadline, "the router did not settle on the configuration it started with"
        time.sleep(1)


def _settled(base_url: str, etag: str, app: object) -> bool:
    view = httpx.get(f"{base_url}/api/v1/config/hash", timeout=10).json()
    return (
        f'"{view["source_config_hash"]}"' == etag
        and view["activation_status"] == "active"
        and view["active_runtime_hash"] == view["generated_runtime_hash"]
        and getattr(app, "status", None) == "RUNNING"
    )


def test_quickstart_notebook_runs_against_the_router(stack: Stack, tmp_path: Path) -> None:
    etag, version = _config_etag_and_version(stack.base_url)
    upstream_before = stack.upstream_a.request_count + stack.upstream_b.request_count
    try:
        notebook = run_notebook("quickstart.ipynb", {"SVC_SR_BASE_URL": stack.base_url}, tmp_path)
        left_as_found = _config_etag_and_version(stack.base_url)[0] == etag
    finally:
        _restore_config(stack.base_url, etag, version)
    assert not [o for o in outputs_of(notebook) if o.output_type == "error"]
    # it really went through the router to the upstreams, and put the configuration back as it found it
    assert stack.upstream_a.request_count + stack.upstream_b.request_count > upstream_before
    assert left_as_found


def test_routing_quality_notebook_benchmarks_a_sample(tmp_path: Path) -> None:
    assert (SHARED_DATASET / "questions.jsonl").is_file(), f"shared MMLU-Pro data missing at {SHARED_DATASET}"
    notebook = run_notebook(
        "routing-quality.ipynb",
        {
            "SVC_SR_DATASET": str(SHARED_DATASET),
            "SVC_SR_BENCHMARK_PER_CATEGORY": "3",
            "SVC_SR_NOTEBOOK_WORK": str(tmp_path / "work"),
        },
        tmp_path,
    )
    assert (tmp_path / "work" / "accuracy-vs-cost.png").is_file()
    assert any("image/png" in o.get("data", {}) for o in outputs_of(notebook))  # the plot is shown
    assert len(list((tmp_path / "work" / "store" / "runs").iterdir())) == 2


def test_cluster_notebook_reads_serve_and_the_metrics(stack: Stack, tmp_path: Path) -> None:
    import ray

    notebook = run_notebook(
        "cluster-and-scaling.ipynb",
        {
            "SVC_SR_BASE_URL": stack.base_url,
            "SVC_SR_METRICS_URL": stack.metrics_url,
            "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
        },
        tmp_path,
    )
    text = "".join(o.get("text", "") for o in outputs_of(notebook))
    assert "svc-sr" in text and "Router" in text  # the serve status it printed
