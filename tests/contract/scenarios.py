"""The contract test's table types and how a scenario is played through one door.

A `Scenario` is data: the requests of its `Step`s and, per door, the `Outcome` they must
show. `play()` runs it through one door from a clean slate and returns what the door
showed (`Observed`); `unmet()` lists every way that misses the expected outcome and
`differences()` every way two doors' observations differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.contract.answers import Answer, Call
from tests.contract.conftest import ENVOY, FrontDoors, Upstreams, metrics_delta


@dataclass(frozen=True)
class Step:
    """One request and what its answer must show (headers and body: subsets)."""

    call: Call
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None  # a JSON answer's
    text: str | None = None  # the answer's text (chat/Responses, whole or streamed)
    last_event: str | None = None  # a stream's last event: "[DONE]" or a Responses event type


@dataclass(frozen=True)
class Outcome:
    """What one door must observe."""

    steps: tuple[Step, ...]
    completions: tuple[Mapping[str, Any], ...]  # subsets of each complete() record, in order
    metrics: Mapping[str, float]  # a subset of the metrics delta
    upstream_calls: int
    cache_entries: int | None = None  # response-cache entries after the scenario


@dataclass(frozen=True)
class Scenario:
    name: str
    expect: Outcome
    setup: Callable[[Upstreams], None] = lambda up: None
    # Set where the doors differ by design (the reason): then only the routing is compared,
    # and `envoy` is what the Envoy door must observe.
    envoy_differs: str = ""
    envoy: Outcome | None = None

    def outcome(self, door: str) -> Outcome:
        return self.envoy if door == ENVOY and self.envoy is not None else self.expect


# -- playing a scenario ------------------------------------------------------------------------------
@dataclass
class Observed:
    """Everything one door showed for one scenario."""

    answers: list[Answer]
    completions: list[dict[str, Any]]
    metrics: dict[str, float]
    upstream_calls: int
    cache_entries: int

    def routing(self) -> dict[str, Any]:
        """What both doors must agree on even where their answers differ by design."""
        return {
            "headers": [
                {k: v for k, v in a.headers.items() if k.startswith("x-vsr-") or k == "x-security-checks"}
                for a in self.answers
            ],
            "plans": [(c["decision"], c["selected_model"]) for c in self.completions],
        }


def play(scenario: Scenario, doors: FrontDoors, upstreams: Upstreams, door: str) -> Observed:
    upstreams.reset()
    doors.forget()
    scenario.setup(upstreams)
    url, recorded = doors.url(door), doors.completions[door]
    seen, before = len(recorded), doors.metrics[door].snapshot()
    answers = []
    try:
        for step in scenario.outcome(door).steps:
            answers.append(step.call(url))
            doors.settle(door)
    finally:
        upstreams.chat.release()
    return Observed(
        answers,
        [c.as_dict() for c in recorded[seen:]],
        metrics_delta(before, doors.metrics[door].snapshot()),
        upstreams.calls(),
        len(doors.cache),
    )


def unmet(expected: Outcome, seen: Observed) -> list[str]:
    """Every way `seen` misses `expected`."""
    problems: list[str] = []
    if len(seen.answers) != len(expected.steps):
        return [f"{len(seen.answers)} answers for {len(expected.steps)} steps"]
    for n, (step, answer) in enumerate(zip(expected.steps, seen.answers, strict=True)):
        where = f"step {n}"
        if answer.status != step.status:
            problems.append(f"{where}: status {answer.status}, expected {step.status}: {answer.body}")
        problems += [
            f"{where}: header {problem}" for problem in subset_problems(step.headers, answer.headers)
        ]
        if step.body is not None:
            problems += [f"{where}: body {problem}" for problem in subset_problems(step.body, answer.body)]
        if step.text is not None and answer.text != step.text:
            problems.append(f"{where}: text {answer.text!r}, expected {step.text!r}")
        if step.last_event is not None and last_event(answer.body) != step.last_event:
            problems.append(f"{where}: last event {last_event(answer.body)!r}, expected {step.last_event!r}")
    if len(seen.completions) != len(expected.completions):
        problems.append(
            f"{len(seen.completions)} completions recorded, expected {len(expected.completions)}: "
            f"{seen.completions}"
        )
    for n, (want, got) in enumerate(zip(expected.completions, seen.completions, strict=False)):
        problems += [f"completion {n}: {problem}" for problem in subset_problems(want, got)]
    problems += [f"metrics: {problem}" for problem in subset_problems(expected.metrics, seen.metrics)]
    if seen.upstream_calls != expected.upstream_calls:
        problems.append(f"{seen.upstream_calls} upstream calls, expected {expected.upstream_calls}")
    if expected.cache_entries is not None and seen.cache_entries != expected.cache_entries:
        problems.append(f"{seen.cache_entries} cache entries, expected {expected.cache_entries}")
    return problems


def subset_problems(expected: Any, actual: Any, path: str = "") -> list[str]:
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [f"{path or '.'}: {actual!r} is not an object (expected {dict(expected)!r})"]
        out: list[str] = []
        for key, value in expected.items():
            here = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{here}: missing (expected {value!r})")
            else:
                out += subset_problems(value, actual[key], here)
        return out
    if isinstance(expected, float) and isinstance(actual, int | float):
        return [] if actual == pytest.approx(expected) else [f"{path}: {actual!r}, expected {expected!r}"]
    return [] if actual == expected else [f"{path}: {actual!r}, expected {expected!r}"]


def last_event(body: Any) -> str | None:
    if not isinstance(body, list) or not body:
        return None
    event = body[-1]
    return event if isinstance(event, str) else event.get("type")


def differences(scenario: Scenario, ingress: Observed, envoy: Observed) -> list[str]:
    """Every way the doors' observations differ; only the routing where they differ by design."""
    if scenario.envoy_differs:
        if ingress.routing() == envoy.routing():
            return []
        return [
            f"routing differs ({scenario.envoy_differs}):\n  ingress: {ingress.routing()}\n"
            f"  envoy:   {envoy.routing()}"
        ]
    out = []
    for part in ("answers", "completions", "metrics", "upstream_calls", "cache_entries"):
        if getattr(ingress, part) != getattr(envoy, part):
            out.append(
                f"{part} differ:\n  ingress: {getattr(ingress, part)}\n  envoy:   {getattr(envoy, part)}"
            )
    return out
