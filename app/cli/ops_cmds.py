"""`svc-sr route preview|probe`, `svc-sr request chat`, `svc-sr completion`."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import httpx
from rich.console import Console

from app.cli.remote import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    Remote,
    check,
    echo_json,
    error_text,
    fail,
    option_group,
    remote_options,
    status_exit_code,
)

console = Console(stderr=True)
DEFAULT_PROXY = "http://127.0.0.1:8801"
ROUTING_HEADERS = (
    "x-selected-model",
    "x-routing-confidence",
    "x-request-id",
    "x-cache-status",
    "x-processing-time",
    "x-security-checks",
)


def _messages(text: str, system: str | None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": text}]


@click.group("route")
def route() -> None:
    """Inspect routing decisions."""


@route.command("preview")
@click.argument("text")
@click.option("--model", default="MoM", show_default=True)
@click.option("--system", default=None, help="Optional system message.")
@click.option("--seed", type=int, default=None, help="Sampling seed for weighted selection.")
@click.option(
    "--local",
    "local_config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Preview in-process against this config file instead of a running router.",
)
@click.option("--full", is_flag=True, help="Print the whole preview (signals, candidates, rewritten body).")
@remote_options
def route_preview(
    text: str,
    model: str,
    system: str | None,
    seed: int | None,
    local_config: Path | None,
    full: bool,
    remote: Remote,
) -> None:
    """Evaluate signals, decision and model selection for TEXT without calling any backend."""
    body: dict[str, Any] = {"model": model, "messages": _messages(text, system)}
    if local_config is not None:
        result = _local_preview(local_config, body, seed)
    else:
        if seed is not None:
            body["preview_context"] = {"seed": seed}
        with remote.client() as client, console.status("routing preview..."):
            response = client.request("POST", "/api/v1/routing/preview", json=body)
        check(response)
        result = response.json()
    if full:
        echo_json(result)
        return
    echo_json(
        {
            k: result.get(k)
            for k in (
                "decision",
                "selected_model",
                "selection_status",
                "selection_method",
                "selection_provenance",
                "confidence",
                "reason_code",
            )
        }
        | {
            "matched_signals": [
                f"{s['type']}:{s['name']}" for s in result.get("signals", []) if s.get("matched")
            ]
        }
    )


def _local_preview(path: Path, body: dict[str, Any], seed: int | None) -> dict[str, Any]:
    import asyncio

    from app.common.errors import SvcError
    from app.config.errors import ConfigError
    from app.config.loader import load_config
    from app.exchange.openai_schemas import validate_chat_body
    from app.pipeline import PipelineServices, RouterPipeline, encoder_embed

    try:
        body = validate_chat_body(body)  # as a front door would: route() takes it validated
    except SvcError as exc:
        fail(f"preview failed: {exc.message}", EXIT_INVALID)
    try:
        config = load_config(path).config
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)
    services = PipelineServices()
    if config.routing.signals.embeddings:  # only load the encoder when a rule needs it
        from app.runtime.encoder import shared_encoder

        services.embed = encoder_embed(shared_encoder())
    pipeline = RouterPipeline(config, services)
    with console.status("loading and evaluating signals..."):
        try:
            return asyncio.run(pipeline.preview(body, {}, seed=seed))
        except Exception as exc:
            status = getattr(exc, "status", None)
            fail(
                f"preview failed: {exc}",
                EXIT_INVALID if isinstance(status, int) and status < 500 else EXIT_FAILURE,
            )


@click.group("request")
def request() -> None:
    """Send requests through the router's data plane."""


@dataclass(frozen=True)
class Proxy:
    """The data plane a request goes to: --endpoint, --timeout, --api-key-env."""

    endpoint: str
    timeout: float
    api_key_env: str

    def headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env, "")
        return {"authorization": f"Bearer {key}"} if key else {}


proxy_options = option_group(
    "proxy",
    Proxy,
    click.option(
        "--endpoint",
        envvar="SVC_SR_PROXY",
        default=DEFAULT_PROXY,
        show_default=True,
        help="Data-plane base URL (env SVC_SR_PROXY).",
    ),
    click.option("--timeout", default=300.0, show_default=True, type=float),
    click.option(
        "--api-key-env",
        default="OPENAI_API_KEY",
        show_default=True,
        help="Environment variable with the listener API key (sent as Bearer when set).",
    ),
)


@request.command("chat")
@click.argument("text")
@click.option("--model", default="MoM", show_default=True)
@click.option("--system", default=None)
@click.option("--max-tokens", type=int, default=None)
@click.option("--stream", is_flag=True, help="Stream the answer as it is generated.")
@proxy_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole JSON answer.")
def request_chat(
    text: str,
    model: str,
    system: str | None,
    max_tokens: int | None,
    stream: bool,
    proxy: Proxy,
    as_json: bool,
) -> None:
    """One-shot chat completion through the proxy; routing headers go to stderr."""
    body: dict[str, Any] = {"model": model, "messages": _messages(text, system), "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    headers = proxy.headers()
    url = proxy.endpoint.rstrip("/") + "/v1/chat/completions"
    try:
        with httpx.Client(timeout=proxy.timeout) as client:
            if stream:
                _stream(client, url, body, headers)
                return
            with console.status(f"waiting for {model}..."):
                response = client.post(url, json=body, headers=headers)
    except httpx.TimeoutException:
        fail(f"POST {url}: timed out", EXIT_FAILURE)
    except httpx.TransportError as exc:
        fail(f"cannot reach {proxy.endpoint}: {type(exc).__name__}", EXIT_UNREACHABLE)
    _print_routing(response.headers)
    if response.status_code >= 300:
        fail(error_text(response), status_exit_code(response.status_code))
    answer = response.json()
    if as_json:
        echo_json(answer)
        return
    choices = answer.get("choices") or [{}]
    click.echo((choices[0].get("message") or {}).get("content") or "")


def _print_routing(headers: httpx.Headers) -> None:
    found = {name: headers[name] for name in ROUTING_HEADERS if name in headers}
    if found:
        console.print("  ".join(f"{k}={v}" for k, v in found.items()), highlight=False)


def _stream(client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    with client.stream("POST", url, json=body, headers=headers) as response:
        _print_routing(response.headers)
        if response.status_code >= 300:
            response.read()
            fail(error_text(response), status_exit_code(response.status_code))
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            for choice in chunk.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    click.echo(piece, nl=False)
        click.echo()


PROBE_HEADERS = (
    "x-vsr-selected-decision",
    "x-selected-model",
    "x-routing-confidence",
    "x-cache-status",
    "x-security-checks",
    "x-vsr-unscanned",
    "x-classification-time",
    "x-processing-time",
    "x-request-id",
)


@route.command("probe")
@click.argument("text")
@click.option("--model", default="MoM", show_default=True)
@click.option("--system", default=None, help="Optional system message.")
@click.option(
    "--max-tokens", type=int, default=1, show_default=True, help="Answer length asked of the model."
)
@proxy_options
def route_probe(text: str, model: str, system: str | None, max_tokens: int, proxy: Proxy) -> None:
    """Send TEXT through the data plane for real (signals, guards, cache, the chosen backend,
    a short answer) and print how it was routed (JSON): status, decision, model, cache status,
    security checks, timings and the answer's routing_metadata. Unlike `route preview` this
    calls the backend, reads and writes the cache and counts in the metrics."""
    body: dict[str, Any] = {"model": model, "messages": _messages(text, system), "max_tokens": max_tokens}
    url = proxy.endpoint.rstrip("/") + "/v1/chat/completions"
    started = time.perf_counter()
    try:
        with httpx.Client(timeout=proxy.timeout) as client:
            response = client.post(url, json=body, headers=proxy.headers())
    except httpx.TimeoutException:
        fail(f"POST {url}: timed out", EXIT_FAILURE)
    except httpx.TransportError as exc:
        fail(f"cannot reach {proxy.endpoint}: {type(exc).__name__}", EXIT_UNREACHABLE)
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    routing = {name: response.headers[name] for name in PROBE_HEADERS if name in response.headers}
    report: dict[str, Any] = {
        "status": response.status_code,
        "latency_ms": round((time.perf_counter() - started) * 1000, 1),
        "headers": routing,
    }
    if isinstance(answer, dict):
        report["routing_metadata"] = answer.get("routing_metadata")
        if "error" in answer:
            report["error"] = answer["error"]
    echo_json(report)
    if response.status_code >= 300:
        sys.exit(status_exit_code(response.status_code))


SHELLS = ("bash", "zsh", "fish")
RC_FILES = {"bash": "~/.bashrc", "zsh": "~/.zshrc", "fish": "~/.config/fish/completions/svc-sr.fish"}


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS), default="bash")
@click.option("--install", is_flag=True, help="Add the completion to the shell's startup file.")
@click.pass_context
def completion(ctx: click.Context, shell: str, install: bool) -> None:
    """Show (or install) shell completion for bash, zsh or fish."""
    from click.shell_completion import get_completion_class

    root = ctx.find_root().command
    cls = get_completion_class(shell)
    if cls is None:
        fail(f"unsupported shell {shell}", EXIT_INVALID)
    script = cls(root, {}, "svc-sr", "_SVC_SR_COMPLETE").source()
    if not install:
        click.echo(script)
        return
    target = Path(os.path.expanduser(RC_FILES[shell]))
    target.parent.mkdir(parents=True, exist_ok=True)
    if shell == "fish":
        target.write_text(script)
    else:
        line = f'eval "$(_SVC_SR_COMPLETE={shell}_source svc-sr)"'
        existing = target.read_text() if target.exists() else ""
        if line not in existing:
            with target.open("a") as handle:
                handle.write(f"\n# svc-sr shell completion\n{line}\n")
    console.print(f"completion installed in {target}; open a new shell")
    sys.exit(0)


def register(cli: click.Group) -> None:
    for command in (route, request, completion):
        cli.add_command(command)
