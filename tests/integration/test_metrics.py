"""GET /metrics of the Observability deployment after a known request mix.

The svc-sr app runs two Router replicas (conftest), so these totals only come out
right when every replica's counters are summed. Counters are cumulative for the
whole session, so the test compares deltas around its own mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Series:
    response = httpx.get(url, timeout=5)
    assert response.status_code == 200
    series: Series = {}
    for family in text_string_to_metric_families(response.text):  # also proves the format parses
        for sample in family.samples:
            series[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return series


def value(series: Series, name: str, **labels: str) -> float:
    return series.get((name, tuple(sorted(labels.items()))), 0.0)


def eventually(check: Callable[[], None], timeout_s: float = 20.0) -> None:
    """Replicas push about once a second: retry the assertions until they hold or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_totals_over_two_router_replicas_after_a_known_mix(stack: Stack) -> None:
    before = scrape(stack.metrics_url)
    client = openai.OpenAI(base_url=stack.v1, api_key="unused", max_retries=0)
    # math decision -> model-a (priced: prompt 1/1M, completion 2/1M USD); distinct questions, so the
    # decision's semantic cache answers none of them
    questions = [
        "Solve the quadratic equation x^2 - 5x + 6 = 0 for x.",
        "What is the equation of a circle centred at the origin with radius 3?",
        "Balance the chemical equation for burning methane in oxygen.",
        "Which differential equation describes radioactive decay over time?",
        "Derive the Schrodinger equation for a free particle in one dimension.",
        "In economics, what does the quantity equation of money say about inflation?",
    ]
    for question in questions:
        client.chat.completions.create(model="MoM", messages=[{"role": "user", "content": question}])
    stream = client.chat.completions.create(
        model="MoM", stream=True, messages=[{"role": "user", "content": "metricsmix: take the derivative"}]
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    for _ in range(2):
        client.chat.completions.create(model="model-b", messages=[{"role": "user", "content": "hello"}])
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(
            model="MoM",
            messages=[
                {
                    "role": "user",
                    "content": "securechat: my social security number is 536-22-8451, file my taxes",
                }
            ],
        )
    with pytest.raises(openai.APIStatusError) as down:
        client.chat.completions.create(model="MoM", messages=[{"role": "user", "content": "alldowntest now"}])
    assert down.value.status_code in (503, 504)
    bad = httpx.post(
        f"{stack.v1}/chat/completions",
        content=b"{not json",
        timeout=10,
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 400

    def check() -> None:
        after = scrape(stack.metrics_url)

        def d(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        assert d("llm_model_requests_total", model="model-a") == 7
        assert d("llm_model_requests_total", model="model-b") == 2
        assert d("llm_routing_reason_codes_total", reason_code="auto_routing", model="model-a") == 7
        assert d("llm_routing_reason_codes_total", reason_code="model_specified", model="model-b") == 2
        assert d("svc_router_requests_total", endpoint="chat_completions", category="math", status="200") == 7
        assert d("svc_router_requests_total", endpoint="chat_completions", category="none", status="400") == 1
        assert d("svc_router_pii_detections_total", action="block") == 1
        assert d("llm_request_errors_total", model="MoM", reason="pii_policy_denied") == 1
        assert d("llm_request_errors_total", model="model-dead", reason="upstream_5xx") == 1
        assert d("llm_request_errors_total", model="unknown", reason="parse_error") == 1
        assert d("llm_model_ttft_seconds_count", model="model-a") == 7
        assert d("llm_model_tpot_seconds_count", model="model-a") == 7
        assert d("llm_model_cost_total", model="model-a", currency="USD") > 0
        # every answered request (upstream, block, 503); the unparseable one never reached the Router
        assert d("svc_router_request_duration_seconds_count", endpoint="chat_completions") == 11

    eventually(check)
    from ray import serve

    sources = serve.get_deployment_handle("Observability", "svc-sr").sources.remote().result()
    assert sum(1 for s in sources if s.startswith("Router/")) == 2  # both replicas report
