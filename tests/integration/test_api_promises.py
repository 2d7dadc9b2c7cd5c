"""Every promise of the API holds on the live graph (docs/management-api.md, "Keeping the OpenAPI
document honest" and "Limits"), through `svc-sr serve` with Envoy, as a client sees it:

- `schemathesis run --checks all` against the served /openapi.json (tests/integration/
  schemathesis.toml; the two routes whose 501 the contract mandates left out) finds nothing;
- hostile bodies (nested 50,000 levels deep, a 5 MB prompt, a lone UTF-16 surrogate, control
  characters) answer 4xx with the spec's error body at both front doors (the Ingress, Envoy and
  its ext_proc bridge) and the management API, and hypothesis generates more that find no 5xx;
- a 5xx is found by its request id in `svc-sr logs`, for each front door.

Twice: the shipped configs/config.yaml (its backends a fake upstream on 127.0.0.1), and the same
with every optional store on: the management store on Redis (with it the memories, replay records,
the Responses store), the response cache on Redis, the vector stores on Milvus Lite, the memory
plugin. One `svc-sr serve` per configuration, shared by the module's tests. Schemathesis runs
once, on the second.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.common.ports import free_port
from tests.fakes.configs import redis_store
from tests.fakes.stores import redis_with_search
from tests.fakes.upstream import FakeUpstream
from tests.integration.test_cli_restart import ROOT, SVC_SR, Cli

pytestmark = [pytest.mark.integration, pytest.mark.cli_stack]

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))
ST_CONFIG = Path(__file__).with_name("schemathesis.toml")
# The contract's NOT_IMPLEMENTED older paths: their 501 is mandated.
MANDATED_501 = ["/api/v1/classify/combined", "/metrics/classification"]
CHAT = "/v1/chat/completions"
DEEP = 50_000
FIVE_MB = 5_000_000


@dataclass
class Live:
    name: str
    cli: Cli
    envoy: str  # Envoy's listener: http://127.0.0.1:<port>
    upstream: FakeUpstream

    @property
    def base(self) -> str:
        return self.cli.base

    def logs(self, service: str) -> str:
        shown = subprocess.run(
            [SVC_SR, "logs", service, "-n", "400"],
            cwd=ROOT,
            env=self.cli.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return shown.stdout + shown.stderr


def served_config(work: Path, upstream: FakeUpstream, port: int, stores: str | None) -> Path:
    """configs/config.yaml, its backends the fake upstream and its ports free ones; `stores`: a
    Redis URL to put every optional store on (None: as shipped)."""
    document = copy.deepcopy(yaml.safe_load((ROOT / "configs" / "config.yaml").read_text()))
    for model in document["providers"]["models"]:
        for ref in model.get("backend_refs", []):
            ref["endpoint"] = upstream.host_url.removeprefix("http://")
    document["listeners"][0]["port"] = free_port()
    services = document["global"]["services"]
    services["management_api"]["port"] = port
    services.setdefault("envoy", {})["admin_port"] = free_port()
    services.setdefault("ext_proc", {})["port"] = free_port()
    services["observability"]["metrics"]["port"] = free_port()
    if stores is not None:
        global_ = document["global"]
        cache = global_["stores"]["response_cache"]
        cache.update(redis_store(stores, f"promises-{port}"))
        global_["stores"]["vector_store"] = {"backend_type": "milvus"}  # Milvus Lite, its own file
        general = next(d for d in document["routing"]["decisions"] if d["name"] == "general")
        general["plugins"].append({"type": "memory", "configuration": {"enabled": True}})
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(scope="module", params=["default", "stores"])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    work = tmp_path_factory.mktemp(f"promises-{request.param}")
    with FakeUpstream(name="promises") as upstream:
        if request.param == "default":
            yield from _serve(request.param, work, upstream, None)
        else:
            with redis_with_search(work) as redis_url:
                yield from _serve(request.param, work, upstream, redis_url)


def _serve(name: str, work: Path, upstream: FakeUpstream, redis_url: str | None) -> Iterator[Live]:
    port = free_port()
    config_path = served_config(work, upstream, port, redis_url)
    cli = Cli(work, config_path, port, with_envoy=True)
    if redis_url is not None:
        cli.env["SVC_SR_MANAGEMENT_STORE_URL"] = redis_url
    process = cli.serve()
    envoy = f"http://127.0.0.1:{yaml.safe_load(config_path.read_text())['listeners'][0]['port']}"
    try:
        yield Live(name, cli, envoy, upstream)
    finally:
        cli.stop(process)


# -- schemathesis ------------------------------------------------------------------------------


# Once, on the stack with every optional store on: the operations, and the code from the doors
# to the stores, are the same on both stacks; only the stores' backends differ, and the
# file-backed management store is fuzzed operation by operation in-process
# (tests/unit/management/test_management_fuzz.py, both backends). Run on the default stack too,
# it cost 281 s more of CI's 90-minute limit.
@pytest.mark.parametrize("live", ["stores"], indirect=True)
def test_schemathesis_every_check_finds_nothing(live: Live, tmp_path: Path) -> None:
    command = [SCHEMATHESIS, "--config-file", str(ST_CONFIG), "--no-color", "run"]
    command += [f"{live.base}/openapi.json", "--checks", "all"]
    for path in MANDATED_501:
        command += ["--exclude-path", path]
    command += ["--report", "junit", "--report-junit-path", str(tmp_path / "junit.xml")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    summary = done.stdout[done.stdout.rfind("SUMMARY") :]
    print(f"schemathesis ({live.name}):\n{summary}")  # the case counts, with pytest -s
    counts = dict(re.findall(r"(ST\d+ [^:\n]+): (\d+)", summary))
    assert done.returncode == 0 and not counts, (
        f"{live.name}: {counts}\n{done.stdout[-12000:]}\n{done.stderr[-2000:]}"
    )
    selected = re.search(r"Selected: (\d+)/(\d+)", summary)
    tested = re.search(r"Tested: (\d+)", summary)
    assert selected and tested, summary
    # every operation but the two was run
    assert int(tested[1]) == int(selected[1]) == int(selected[2]) - len(MANDATED_501), summary


# -- hostile bodies ----------------------------------------------------------------------------


def chat(content: str) -> dict[str, Any]:
    return {"model": "MoM", "messages": [{"role": "user", "content": content}]}


HOSTILE = {
    "nested 50,000 deep": (
        b'{"model":"MoM","messages":[{"role":"user","content":"hi"}],"x":' + b"[" * DEEP + b"]" * DEEP + b"}"
    ),
    "a 5 MB prompt": json.dumps(chat("word " * (FIVE_MB // 5))).encode(),
    "a lone surrogate": b'{"model":"MoM","messages":[{"role":"user","content":"a \\ud800 b"}]}',
}


def assert_spec_error(answer: httpx.Response, management: bool = False) -> None:
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:300])
    error = answer.json()["error"]
    keys = {"code", "message", "timestamp"} if management else {"message", "type", "code"}
    assert keys <= set(error), error


@pytest.mark.parametrize("body", list(HOSTILE))
def test_hostile_bodies_answer_4xx_at_both_doors_and_management(live: Live, body: str) -> None:
    raw = HOSTILE[body]
    with httpx.Client(timeout=120) as client:
        for door in (live.base, live.envoy):
            answer = client.post(door + CHAT, content=raw, headers={"content-type": "application/json"})
            assert_spec_error(answer)
            expected = 413 if body == "a 5 MB prompt" else 400
            assert answer.status_code == expected, (door, answer.text[:300])
        for path in ("/api/v1/routing/preview", "/api/v1/config/plan"):
            answer = client.post(live.base + path, content=raw, headers={"content-type": "application/json"})
            # 413 comes from the body-size limit before any route, in the data plane's body
            assert_spec_error(answer, management=answer.status_code != 413)


def test_control_characters_are_text(live: Live) -> None:
    """Escaped control characters are text like any other: routed and answered."""
    body = chat("tab\there, bell\x07, nul\x00, escape\x1b[0m: what is 2+2?")
    with httpx.Client(timeout=120) as client:
        for door in (live.base, live.envoy):
            answer = client.post(door + CHAT, json=body)
            assert answer.status_code == 200, (door, answer.text[:300])


# Text with every kind of character hypothesis knows, lone surrogates (category Cs) and control
# characters included; json.dumps writes those as \\u escapes.
TEXT = st.text(st.characters(categories=["L", "N", "P", "S", "Z", "Cc", "Cs"]), max_size=40)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def hostile_body(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["text", "nested", "number", "field", "bytes"]))
    if kind == "text":
        return json.dumps(chat(draw(TEXT))).encode()
    if kind == "nested":
        depth = draw(st.integers(min_value=60, max_value=3000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        value = opener * depth + "1" + closer * depth
        return f'{{"model":"MoM","messages":[{{"role":"user","content":"hi"}}],"x":{value}}}'.encode()
    if kind == "number":
        number = draw(st.sampled_from(["1e400", "-1e999", "123456789012345678901234567890", "NaN"]))
        field = draw(st.sampled_from(["max_tokens", "temperature", "top_p", "n"]))
        return f'{{"model":"MoM","messages":[{{"role":"user","content":"hi"}}],"{field}":{number}}}'.encode()
    if kind == "field":
        body: dict[str, Any] = chat("hello there")
        body[draw(st.sampled_from(["messages", "model", "tools", "stream", "user", "extra"]))] = draw(
            JSON_VALUES
        )
        return json.dumps(body).encode()
    return draw(st.binary(max_size=200))


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(raw=hostile_body())
def test_generated_hostile_bodies_find_no_5xx(live: Live, raw: bytes) -> None:
    with httpx.Client(timeout=120) as client:
        for url in (
            live.base + CHAT,
            live.envoy + CHAT,
            live.base + "/v1/responses",
            live.base + "/api/v1/routing/preview",
            live.base + "/api/v1/config/validate",
        ):
            answer = client.post(url, content=raw, headers={"content-type": "application/json"})
            assert answer.status_code < 500, (url, raw[:200], answer.status_code, answer.text[:300])


# -- a 5xx is traceable ------------------------------------------------------------------------


def test_a_5xx_is_found_by_its_request_id_in_the_logs(live: Live) -> None:
    """Every backend failing: each door answers 5xx, and the id the client got is in the door's
    log at once (the Ingress's in `svc-sr logs service`, Envoy's in `svc-sr logs envoy`)."""
    live.upstream.configure(fail_status=500, fail_times=None)
    try:
        with httpx.Client(timeout=120) as client:
            answers = {
                "service": client.post(live.base + CHAT, json=chat("tell me a story about ships")),
                "envoy": client.post(live.envoy + CHAT, json=chat("tell me a story about trains")),
            }
    finally:
        live.upstream.reset()
    for service, answer in answers.items():
        assert answer.status_code >= 500, (service, answer.status_code, answer.text[:300])
        request_id = answer.headers["x-request-id"]
        shown = live.logs(service)
        assert request_id in shown, (
            f"{service}: {request_id} ({answer.status_code} {answer.text[:300]}) not in "
            f"`svc-sr logs {service}`:\n{shown[-3000:]}"
        )
