"""cluster/grafana-dashboard.json queries only series that exist. Grafana shows a panel over a
misspelt metric as "No data", never as an error, so a renamed metric would silently blank the
dashboard: every name is checked against what the code exports, rendered the way the
endpoints render it (svc-sr's Observability registry on :9190, a svc-srun worker's /metrics),
and Ray Serve's names against the queries of Ray's own Serve dashboards."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ray.dashboard.modules.metrics.dashboards.serve_dashboard_panels import serve_dashboard_config
from ray.dashboard.modules.metrics.dashboards.serve_deployment_dashboard_panels import (
    serve_deployment_dashboard_config,
)

from app.observability.metrics import MetricsAggregator
from app.srun.metrics import WorkerMetrics

DASHBOARD = Path(__file__).resolve().parents[3] / "cluster" / "grafana-dashboard.json"
SVC_SR_PREFIXES = ("svc_router_", "llm_", "svc_model_runtime_")
SRUN_PREFIX = "svc_srun_"
RAY_SERVE_PREFIX = "ray_serve_"
CHECKED_PREFIXES = (*SVC_SR_PREFIXES, SRUN_PREFIX, RAY_SERVE_PREFIX)
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_TYPE_LINE = re.compile(r"^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$", re.MULTILINE)


@dataclass(frozen=True)
class Exported:
    series: frozenset[str]  # every sample name a scrape can hold
    buckets: frozenset[str]  # the `_bucket` series of histograms


def _metric_names(expr: str, prefixes: tuple[str, ...] = CHECKED_PREFIXES) -> set[str]:
    """Identifiers in a PromQL expression that name a metric of ours or Serve's (label values,
    which are quoted, are skipped)."""
    unquoted = _STRING.sub('""', expr)
    return {name for name in _IDENTIFIER.findall(unquoted) if name.startswith(prefixes)}


def _parse_exposition(text: str) -> Exported:
    series: set[str] = set()
    buckets: set[str] = set()
    for name, kind in _TYPE_LINE.findall(text):
        if kind == "histogram":
            series.update({f"{name}_bucket", f"{name}_sum", f"{name}_count"})
            buckets.add(f"{name}_bucket")
        else:
            series.add(name)
    return Exported(frozenset(series), frozenset(buckets))


def _ray_serve_names() -> frozenset[str]:
    """Every ray_serve_* series Ray 2.60's own Serve dashboards query (the exported names, with
    `_total` on counters and `_bucket` on histograms)."""
    exprs = [
        target.expr
        for config in (serve_dashboard_config, serve_deployment_dashboard_config)
        for panel in [*config.panels, *(p for row in config.rows for p in row.panels)]
        for target in panel.targets
    ]
    return frozenset(name for expr in exprs for name in _metric_names(expr, (RAY_SERVE_PREFIX,)))


def _exported() -> Exported:
    router = _parse_exposition(MetricsAggregator().render())
    worker = _parse_exposition(WorkerMetrics().render().decode())
    ray_names = _ray_serve_names()
    ray_buckets = {name for name in ray_names if name.endswith("_bucket")}
    return Exported(router.series | worker.series | ray_names, router.buckets | worker.buckets | ray_buckets)


EXPORTED = _exported()


def _unknown_metrics(expr: str, exported: Exported = EXPORTED) -> set[str]:
    return _metric_names(expr) - exported.series


def _histogram_quantile_args(expr: str) -> Iterator[str]:
    """The argument list of every histogram_quantile(...) call, parentheses balanced."""
    for match in re.finditer(r"histogram_quantile\s*\(", expr):
        depth, start = 1, match.end()
        for index in range(start, len(expr)):
            depth += {"(": 1, ")": -1}.get(expr[index], 0)
            if depth == 0:
                yield expr[start:index]
                break
        else:
            raise AssertionError(f"unbalanced histogram_quantile in {expr!r}")


def _quantile_misuse(expr: str, exported: Exported = EXPORTED) -> list[str]:
    """Problems with histogram_quantile calls: a series that is not a histogram's `_bucket`,
    or an aggregation that drops `le`."""
    problems = []
    for args in _histogram_quantile_args(expr):
        names = _metric_names(args)
        if not names:
            problems.append(f"no metric in histogram_quantile({args})")
        problems.extend(f"{name} is not a histogram _bucket series" for name in names - exported.buckets)
        grouped = re.findall(r"\bby\s*\(([^)]*)\)", args)
        if not grouped or not all("le" in {g.strip() for g in group.split(",")} for group in grouped):
            problems.append(f"histogram_quantile({args}) does not aggregate by le")
    return problems


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    top: list[dict[str, Any]] = dashboard["panels"]
    return [*top, *(child for panel in top for child in panel.get("panels", []))]


def _query_panels() -> list[dict[str, Any]]:
    return [p for p in _all_panels(_dashboard()) if p["type"] != "row"]


def _all_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    exprs = [(f"panel {p['id']} {p['title']}", t["expr"]) for p in _query_panels() for t in p["targets"]]
    for variable in _dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append((f"variable {variable['name']}", variable["query"]["query"]))
    return exprs


def test_dashboard_identity_and_datasource_variable() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "svc-sr"
    assert dashboard["title"] == "svc-sr router"
    assert dashboard["schemaVersion"] >= 36  # panels carry datasource objects {type, uid}
    (datasource,) = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    assert datasource["type"] == "datasource"
    assert datasource["query"] == "prometheus"


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in _all_panels(_dashboard())]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("panel", _query_panels(), ids=lambda p: f"{p['id']}-{p['title']}")
def test_panel_queries_the_datasource_variable(panel: dict[str, Any]) -> None:
    assert panel["datasource"] == DATASOURCE
    assert panel["targets"]
    ref_ids = [t["refId"] for t in panel["targets"]]
    assert len(ref_ids) == len(set(ref_ids))
    for target in panel["targets"]:
        assert target["datasource"] == DATASOURCE
        assert target["expr"].strip()
        assert _metric_names(target["expr"]), f"{target['expr']!r} names no known metric family"


@pytest.mark.parametrize(("where", "expr"), _all_exprs(), ids=[w for w, _ in _all_exprs()])
def test_every_metric_named_is_exported(where: str, expr: str) -> None:
    assert not _unknown_metrics(expr), where


@pytest.mark.parametrize(("where", "expr"), _all_exprs(), ids=[w for w, _ in _all_exprs()])
def test_histogram_quantile_reads_histogram_buckets_by_le(where: str, expr: str) -> None:
    assert not _quantile_misuse(expr), where


def test_the_dashboard_shows_svc_sr_and_ray_serve_together() -> None:
    named = {name for _, expr in _all_exprs() for name in _metric_names(expr)}
    assert any(name.startswith(SVC_SR_PREFIXES) for name in named)
    assert {
        "ray_serve_num_http_requests_total",
        "ray_serve_deployment_processing_latency_ms_bucket",
        "ray_serve_deployment_replica_healthy",
        "ray_serve_replica_processing_queries",
    } <= named


def test_the_exported_sets_come_from_the_registries() -> None:
    # Guards the derivation itself: an empty parse would make every check below vacuous.
    assert "svc_router_requests_total" in EXPORTED.series
    assert "llm_model_ttft_seconds_bucket" in EXPORTED.buckets
    assert "svc_model_runtime_request_duration_seconds_bucket" in EXPORTED.buckets
    assert "svc_srun_batch_rows_bucket" in EXPORTED.buckets
    assert "ray_serve_deployment_processing_latency_ms_bucket" in EXPORTED.buckets


@pytest.mark.parametrize(
    "expr",
    [
        "sum(rate(svc_router_no_such_metric_total[5m]))",
        "sum by (model) (rate(llm_model_requests[5m]))",  # counter without _total
        "svc_model_runtime_request_duration_seconds",  # a histogram's family name is no series
        "ray_serve_num_http_request_total",
    ],
)
def test_a_metric_that_does_not_exist_is_caught(expr: str) -> None:
    assert _unknown_metrics(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "histogram_quantile(0.9, sum by (le) (rate(svc_router_requests_total[5m])))",  # a counter
        "histogram_quantile(0.9, sum by (le) (rate(llm_model_ttft_seconds_sum[5m])))",
        "histogram_quantile(0.9, sum by (model) (rate(llm_model_ttft_seconds_bucket[5m])))",  # le dropped
    ],
)
def test_histogram_quantile_misuse_is_caught(expr: str) -> None:
    assert _quantile_misuse(expr)


def test_label_values_are_not_taken_for_metric_names() -> None:
    assert _metric_names('sum(rate(llm_request_errors_total{reason="llm_timeout"}[5m]))') == {
        "llm_request_errors_total"
    }
