"""`svc-sr serve` says "ready" only once a routed request was answered end to end through each
front door (the Serve endpoint and, when it runs, Envoy with the ext_proc sidecar).

Deployments that report healthy and a proxy that listens do not prove a router that answers:
a new user's first request could still fail (a backend that crashes on its first completion, a
door that cannot reach the Router). So the start waits for `/ready`, checks that every configured
backend accepts a connection, then sends one MoM request through each door. A backend that is
down does not stop the start (the router must run without its upstreams): it is a loud warning
naming the backends, and the `BackendsReachable` condition of `/api/v1/status` keeps saying so.
A door that cannot answer at all (no connection, a 500) is a failed start.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
from rich.console import Console

from app.common.errors import REQUEST_ID_HEADER
from app.config.document import RouterConfig
from app.upstream.reachability import Backend, unreachable_backends

PROBE_BODY = {
    "model": "MoM",
    "messages": [{"role": "user", "content": "Reply with one word: ready."}],
    "max_tokens": 8,
}
# The start-up requests neither read nor write the response cache: they prove the path to a model.
PROBE_HEADERS = {"x-vsr-cache-control": "bypass"}
ANSWER_TIMEOUT_S = 180.0  # a cold backend's first completion on a busy laptop


@dataclass(frozen=True)
class DoorAnswer:
    door: str
    status: int | None  # None: no HTTP answer at all
    detail: str

    @property
    def fatal(self) -> bool:
        """The door itself failed (not a backend, not a policy of the configuration)."""
        return self.status is None or (self.status >= 500 and self.status != 503)


def wait_ready(http: str, timeout: float) -> str | None:
    """Poll GET /ready until 200; the reason it never came, or None."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    with httpx.Client(base_url=http, timeout=5) as client:
        while time.monotonic() < deadline:
            try:
                response = client.get("/ready")
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            else:
                if response.status_code == 200 or response.status_code in (401, 403):
                    return None  # ready, or readiness is behind management auth: the requests below tell
                body = response.json() if "json" in response.headers.get("content-type", "") else {}
                if body.get("phase") == "error":
                    return f"a model failed to load: {body.get('reason') or body}"
                last = f"waiting for {', '.join(body.get('pending_models') or []) or 'the router'}"
            time.sleep(0.5)
    return f"not ready after {timeout:.0f} s ({last})"


def ask(door: str, base: str, request_id: str) -> DoorAnswer:
    """One routed MoM request through a door."""
    headers = PROBE_HEADERS | {REQUEST_ID_HEADER: request_id}
    began = time.monotonic()
    try:
        response = httpx.post(
            f"{base}/v1/chat/completions", json=PROBE_BODY, headers=headers, timeout=ANSWER_TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        return DoorAnswer(door, None, f"no answer ({type(exc).__name__}: {exc})")
    took = (time.monotonic() - began) * 1000
    if response.status_code == 200:
        model = response.headers.get("x-vsr-selected-model", "?")
        return DoorAnswer(door, 200, f"answered by {model} in {took:.0f} ms")
    try:
        error = response.json().get("error", {})
        why = f"{error.get('code') or error.get('type')}: {error.get('message')}"
    except (ValueError, AttributeError):
        why = response.text[:200]
    return DoorAnswer(door, response.status_code, f"{response.status_code} {why}")


def verify_serving(
    http: str, envoy: str | None, config: RouterConfig, console: Console, ready_timeout: float = 300.0
) -> bool:
    """True when the router answers through every door (a backend that is down only warns)."""
    console.print("checking the router end to end (a routed request through each front door) ...")
    if (reason := wait_ready(http, ready_timeout)) is not None:
        console.print(f"[red]the router is not ready[/red]: {reason}")
        return False
    down = asyncio.run(unreachable_backends(config))
    if down:
        warn_backends_down(down, console)
    doors = [("Serve endpoint", http)] + ([("Envoy + ext_proc", envoy)] if envoy else [])
    answers = [ask(name, base, f"svc-sr-start-{i}") for i, (name, base) in enumerate(doors)]
    for answer in answers:
        colour = "green" if answer.status == 200 else ("red" if answer.fatal else "yellow")
        console.print(f"  [{colour}]{answer.door}[/{colour}]: {answer.detail}")
    if not down and any(a.status == 503 for a in answers):
        console.print(
            "[bold yellow]WARNING[/bold yellow]: a backend accepts connections but did not answer; "
            "see the answers above and `svc-sr logs router`"
        )
    return not any(a.fatal for a in answers)


def warn_backends_down(down: list[Backend], console: Console) -> None:
    console.print("[bold red]" + "!" * 78 + "[/bold red]")
    console.print("[bold red]WARNING: configured backends are unreachable[/bold red] (nothing listens):")
    for backend in down:
        console.print(f"  - {backend.describe()}")
    console.print(
        "svc-sr runs without them; requests routed to them answer 503 until they are up "
        "(`svc-sr status` shows the BackendsReachable condition)."
    )
    console.print("[bold red]" + "!" * 78 + "[/bold red]")
