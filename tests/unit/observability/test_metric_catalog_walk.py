"""Spec 1's metric table (and spec 2's "Router metrics") walked against the catalog
(app/observability/metrics.py): every metric the specs name is registered with their labels and
a type its name and meaning imply, and every registered metric is recorded by some code path
(a recorder call naming it in app/ or deployments/), or rendered from others (DERIVED), or a
listed gap asserted still unrecorded."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import httpx
import pytest

from app.observability.metrics import CATALOG, DERIVED
from app.srun.client import RuntimeCallError, SrunClient

ROOT = Path(__file__).resolve().parents[3]
SPECS = (
    ROOT.parent / "shared" / "spec" / "01-router-management-metrics.md",
    ROOT.parent / "shared" / "spec" / "02-runtime-config-cli.md",
)
# Registered metrics no code path records yet (none: every declared metric is recorded).
NOT_RECORDED: dict[str, str] = {}
RECORDING = frozenset({"inc", "set", "add", "observe"})


def spec_text() -> str:
    missing = [str(p) for p in SPECS if not p.is_file()]
    if missing:
        pytest.fail(f"the contract is not beside the checkout: {', '.join(missing)}")
    return "\n".join(p.read_text(encoding="utf-8") for p in SPECS)


def spec_metrics() -> dict[str, tuple[tuple[str, ...], str]]:
    """name -> (labels, meaning) of every metric table row of the specs."""
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    for line in spec_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or not re.match(r"(svc|llm)_\w+", cells[0]):
            continue
        bare = re.sub(r"\([^)]*\)", "", cells[1] if len(cells) > 1 else "")
        labels = tuple(w.split()[0] for w in bare.split(",") if w.strip() and w.strip() != "none")
        for name in (n.strip() for n in cells[0].split(",")):
            out[name] = (labels, cells[2] if len(cells) > 2 else "")
    return out


def recorded_names() -> set[str]:
    """Metric names given to a recorder call (`.inc/.set/.add/.observe(NAME, ...)`), as a string
    literal or a module constant holding one."""
    names: set[str] = set()
    for root in ("app", "deployments"):
        for path in (ROOT / root).rglob("*.py"):
            if path.name == "metrics.py" and path.parent.name == "observability":
                continue
            text = path.read_text(encoding="utf-8")
            if "svc_" not in text and "llm_" not in text:  # no metric name: nothing to parse
                continue
            tree = ast.parse(text)
            constants = {
                t.id: node.value.value
                for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                for t in node.targets
                if isinstance(t, ast.Name) and isinstance(node.value.value, str)
            }
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                    continue
                if node.func.attr not in RECORDING:
                    continue
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
                elif isinstance(first, ast.Name) and first.id in constants:
                    names.add(constants[first.id])
    return names


def test_every_spec_metric_is_registered_with_its_labels_and_type():
    named = spec_metrics()
    assert len(named) >= 30  # both tables were read
    for name, (labels, meaning) in named.items():
        assert name in CATALOG, f"{name}: named by the spec, not registered"
        definition = CATALOG[name]
        assert set(definition.labels) == set(labels), f"{name}: labels {definition.labels} != spec {labels}"
        if name.endswith("_total"):
            assert definition.kind == "counter", name
        if name.endswith("_seconds") or "histogram" in meaning:
            assert definition.kind == "histogram", name


@pytest.mark.slow
def test_every_registered_metric_is_recorded_or_a_listed_gap():
    recorded = recorded_names()
    named = spec_metrics()
    for name in CATALOG:
        if name in DERIVED:
            assert name not in recorded, f"{name} is rendered from other series, never recorded"
        elif name in NOT_RECORDED:
            assert name in named, f"{name}: not named by the spec and never recorded: remove it"
            assert name not in recorded, f"{name} is recorded now: remove it from NOT_RECORDED"
        else:
            assert name in recorded, f"{name}: declared, never recorded"


async def test_the_client_records_admitted_bytes_and_unknown_answers():
    seen: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(
            client.metrics.value("svc_model_runtime_replica_admitted_bytes", deployment="d", replica="0")
        )
        if request.url.path == "/v1/classify":
            return httpx.Response(200, json={"results": []})
        return httpx.Response(200, content=b"<html>proxy error</html>")

    client = SrunClient(base_url="http://srun", deployment="d")
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://srun")
    body = {"model": "m", "input": ["hello"]}
    assert await client.classify(body) == {"results": []}
    with pytest.raises(RuntimeCallError) as err:
        await client.embeddings(body)
    assert err.value.status == 502 and err.value.code == "unknown_answer"
    assert seen[0] == len(b'{"model":"m","input":["hello"]}')  # admitted while the call ran
    assert client.metrics.value("svc_model_runtime_replica_admitted_bytes", deployment="d", replica="0") == 0
    assert (
        client.metrics.value("svc_model_runtime_unknown_answers_total", deployment="d", reason="not_json")
        == 1
    )
    assert client.metrics.value("svc_model_runtime_requests_total", deployment="d", outcome="failed") == 1
    await client.aclose()
