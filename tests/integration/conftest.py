"""One real local Ray instance per test session, serving the svc-sr graph on 127.0.0.1.

Upstream LLMs are project-written fake servers (tests/fakes/upstream.py) on 127.0.0.1;
everything between the OpenAI SDK and them is the real product.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from app.common.ports import free_port
from tests.fakes.processes import kill_processes_naming, wait_http_ok
from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    base_url: str  # http://127.0.0.1:<port>
    upstream_a: FakeUpstream
    upstream_b: FakeUpstream
    dead_port: int
    metrics_url: str  # the svc-sr app's Observability endpoint (two Router replicas feed it)
    # Only the svc-sr app (route prefix /) has a DecisionModel deployment.
    config_path: Path
    routed_config: dict

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"


def routed_config(a: FakeUpstream, b: FakeUpstream, dead_port: int) -> dict:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "model-b"},
            "models": [
                {
                    "name": "model-a",
                    "provider_model_id": "served-a",
                    "pricing": {"currency": "USD", "prompt_per_1m": 1.0, "completion_per_1m": 2.0},
                    "backend_refs": [{"base_url": a.host_url}],
                },
                {"name": "model-b", "backend_refs": [{"base_url": b.host_url}]},
                {"name": "model-dead", "backend_refs": [{"endpoint": f"127.0.0.1:{dead_port}"}]},
            ],
        },
        "routing": {
            "strategy": "priority",
            "signals": {
                "keywords": [
                    {
                        "name": "math_words",
                        "operator": "OR",
                        "keywords": ["derivative", "integral", "equation"],
                    },
                    {"name": "fallback_words", "operator": "OR", "keywords": ["fallbacktest"]},
                    {"name": "down_words", "operator": "OR", "keywords": ["alldowntest"]},
                    # tests/integration/test_security.py
                    {"name": "secure_words", "operator": "OR", "keywords": ["securechat"]},
                    {"name": "guarded_words", "operator": "OR", "keywords": ["guardedchat"]},
                    {"name": "fastguard_words", "operator": "OR", "keywords": ["fastguard"]},
                ],
                "domains": [{"name": "math", "mmlu_categories": ["math"]}],
                "pii": [{"name": "any_pii", "threshold": 0.5}],
                "embeddings": [
                    {
                        "name": "code_help",
                        "threshold": 0.5,
                        "aggregation_method": "max",
                        "candidates": ["write a python function", "help me debug my code"],
                    },
                ],
            },
            "decisions": [
                {
                    "name": "math",
                    "priority": 100,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "math_words"}]},
                    "modelRefs": [{"model": "model-a"}],
                    "plugins": [
                        {
                            "type": "system_prompt",
                            "configuration": {"system_prompt": "You are a math expert."},
                        },
                        {
                            "type": "semantic-cache",
                            "configuration": {"enabled": True, "similarity_threshold": 0.85},
                        },
                        {
                            "type": "header_mutation",
                            "configuration": {"add": [{"name": "x-route-source", "value": "svc-sr"}]},
                        },
                    ],
                },
                {
                    "name": "code",
                    "priority": 90,
                    "rules": {"operator": "OR", "conditions": [{"type": "embedding", "name": "code_help"}]},
                    "modelRefs": [{"model": "model-b"}],
                },
                {
                    "name": "fallback",
                    "priority": 80,
                    "rules": {
                        "operator": "OR",
                        "conditions": [{"type": "keyword", "name": "fallback_words"}],
                    },
                    "modelRefs": [{"model": "model-dead"}, {"model": "model-a"}],
                    "fallback": {"enabled": True, "max_attempts": 2},
                },
                {
                    "name": "down",
                    "priority": 70,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "down_words"}]},
                    "modelRefs": [{"model": "model-dead"}],
                },
                # test_security.py: below every keyword decision, so it only takes otherwise unmatched requests
                {
                    "name": "math_domain",
                    "priority": 50,
                    "rules": {"operator": "OR", "conditions": [{"type": "domain", "name": "math"}]},
                    "modelRefs": [{"model": "model-a"}],
                },
                {
                    "name": "secure",
                    "priority": 60,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "secure_words"}]},
                    "modelRefs": [{"model": "model-b"}],
                    "plugins": [
                        {
                            "type": "pii",
                            "configuration": {"enabled": True, "pii_types_allowed": ["EMAIL_ADDRESS"]},
                        }
                    ],
                },
                {
                    "name": "guarded",
                    "priority": 60,
                    "rules": {"operator": "OR", "conditions": [{"type": "keyword", "name": "guarded_words"}]},
                    "modelRefs": [{"model": "model-b"}],
                    "plugins": [{"type": "jailbreak", "configuration": {"enabled": True, "threshold": 0.5}}],
                },
                {
                    "name": "block_pii_fast",
                    "priority": 1000,
                    "rules": {
                        "operator": "AND",
                        "conditions": [
                            {"type": "keyword", "name": "fastguard_words"},
                            {"type": "pii", "name": "any_pii"},
                        ],
                    },
                    "plugins": [
                        {
                            "type": "fast_response",
                            "configuration": {"message": "Please remove personal data and ask again."},
                        }
                    ],
                },
            ],
        },
        "global": {
            "stores": {"response_cache": {"enabled": False, "similarity_threshold": 0.9}},
            "services": {"data_plane": {"max_body_bytes": 65536}},
        },
    }


def noroute_config(a: FakeUpstream) -> dict:
    return {
        "version": "v0.3",
        "providers": {"models": [{"name": "model-a", "backend_refs": [{"base_url": a.host_url}]}]},
        "routing": {"decisions": []},
    }


def _report_startup_failure() -> None:
    """The stack is every integration test's fixture: when it cannot start, say why (Serve's
    view and the tail of the controller's log) instead of leaving only the exception. On the
    real stderr: a failed start has taken pytest down before its summary."""
    import glob
    import sys

    from ray import serve

    try:
        print(f"serve.status() at stack failure: {serve.status()}", file=sys.__stderr__)
    except Exception as exc:
        print(f"serve.status() failed too: {exc!r}", file=sys.__stderr__)
    for log in sorted(glob.glob("/tmp/ray/session_latest/logs/serve/controller_*.log"))[-1:]:
        _print_tail(log, 60, sys.__stderr__)


def _start_ray(attempts: int = 2) -> None:
    """Start the session's local Ray instance.

    Three times in some forty suite runs on the 2-core box, `ray.init` started a GCS,
    dashboard and monitors but no raylet (the session's logs hold no raylet file) and gave
    up 30 s later ("The current node timed out during startup"). The half-started session's
    processes outlived the failure; a later Ray instance in the same process then lost its
    GCS, and Ray exits a driver that cannot reach its GCS for 60 s: pytest died with no
    summary. So: print the failure to the real stderr at once (pytest's capture would lose
    it), stop what the failed attempt started, and try once more.
    """
    import glob
    import sys
    import time
    import traceback

    import ray

    if ray.is_initialized():  # a driver auto-started by an earlier local-testing-mode test
        ray.shutdown()
    for attempt in range(1, attempts + 1):
        started, sessions_before = time.monotonic(), set(glob.glob("/tmp/ray/session_2*"))
        try:
            # Logical CPUs (the box has 2): enough for the session's applications side by side,
            # each a whole graph of fractional reservations (at 6, a fourth one's Ingress waited
            # forever once the Storage deployment joined every graph).
            ray.init(num_cpus=8, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
            return
        except Exception:
            print(
                f"ray.init attempt {attempt} failed after {time.monotonic() - started:.1f}s:",
                file=sys.__stderr__,
            )
            traceback.print_exc(file=sys.__stderr__)
            ray.shutdown()
            # Only a session this attempt created is ours to report and stop (its name ends in
            # our pid; other Ray instances may be running). The failed node object is gone, so
            # shutdown() cannot stop what it started.
            for session in set(glob.glob(f"/tmp/ray/session_2*_{os.getpid()}")) - sessions_before:
                _print_session_log_tails(session, sys.__stderr__)
                _kill_processes_of(session)
            if attempt == attempts:
                raise
            time.sleep(2.0)


def _kill_processes_of(session: str) -> None:
    """SIGKILL every process whose command line names `session` (its GCS, monitors, dashboard);
    a path inside it or the whole argument, never a longer session name it is a prefix of."""
    kill_processes_naming(f"{session}/")
    kill_processes_naming(f"{session}\0")


def _print_session_log_tails(session: str, out: object) -> None:
    import glob

    print(
        f"--- {session}: {sorted(os.listdir(session + '/logs')) if os.path.isdir(session + '/logs') else 'no logs'}",
        file=out,
    )
    for log in sorted(glob.glob(f"{session}/logs/*.err")) + sorted(glob.glob(f"{session}/logs/raylet.out")):
        _print_tail(log, 20, out)


def _print_tail(path: str, lines: int, out: object) -> None:
    with open(path, errors="replace") as fh:
        tail = fh.readlines()[-lines:]
    if tail:
        print(f"--- tail of {path}\n" + "".join(tail), file=out)


def _wait_ready(url: str, timeout_s: float = 120.0) -> None:
    wait_http_ok(url, timeout_s)


ROOT = Path(__file__).resolve().parents[2]


def vllm_python() -> Path:
    """The vLLM environment's interpreter (make test sets it up; SVC_SR_VLLM_PYTHON overrides)."""
    python = Path(os.environ.get("SVC_SR_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
    if not python.exists():
        pytest.fail(f"no vLLM environment at {python}: run `bash scripts/vllm-venv.sh` (make test does)")
    return python


@pytest.fixture(scope="session")
def tiny_guard_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/fakes/tiny_llama.py --guard, built once for the session (torch training: about half
    a minute) and read by every test that serves it with vLLM; nobody writes to it."""
    model_dir = tmp_path_factory.mktemp("tiny-guard") / "tiny-llama"
    subprocess.run(
        [str(vllm_python()), str(ROOT / "tests" / "fakes" / "tiny_llama.py"), str(model_dir), "--guard"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return model_dir


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    from deployments.graph import GraphArgs, build_app
    from deployments.serve_env import apply_fast_path_env

    work = tmp_path_factory.mktemp("stack")
    with FakeUpstream(name="a") as a, FakeUpstream(name="b") as b:
        dead_port = free_port()
        routed_path = Path(work, "routed.yaml")
        routed_path.write_text(yaml.safe_dump(routed_config(a, b, dead_port)))
        noroute_path = Path(work, "noroute.yaml")
        noroute_path.write_text(yaml.safe_dump(noroute_config(a)))
        port = free_port()
        # Logical CPUs: two apps of six fractional replicas exceed the 2 real cores' default count.
        apply_fast_path_env()  # as `svc-sr serve` does: HAProxy + throughput-optimized Serve
        # Management state (config versions) of each app under this session's tmp dir, not .cache/
        os.environ["SVC_SR_MANAGEMENT_STATE_DIR"] = str(work / "management-state")
        # Serve kills a proxy not ready within 5 s (serve.start then fails with ActorDiedError):
        # seen on 2 busy cores; the controller reads this at ray.init (docs/deploy.md).
        os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
        _start_ray()
        try:
            try:
                serve.start(http_options={"host": "127.0.0.1", "port": port})
                metrics_port = free_port()
                # Two Router replicas: metric totals must not depend on which one served.
                serve.run(
                    build_app(
                        GraphArgs(
                            config_path=str(routed_path),
                            metrics={"port": metrics_port},
                            deployments={"Router": {"num_replicas": 2}},
                        )
                    ),
                    name="svc-sr",
                    route_prefix="/",
                )
                no_metrics = {"enabled": False}
                # One DecisionModel (MiniLM) is enough for the session: the other apps leave it out.
                serve.run(
                    build_app(
                        GraphArgs(
                            config_path=str(routed_path),
                            router_local_encoder=True,
                            metrics=no_metrics,
                            decision_model=False,
                        )
                    ),
                    name="local-encoder",
                    route_prefix="/local",
                )
                serve.run(
                    build_app(
                        GraphArgs(config_path=str(noroute_path), metrics=no_metrics, decision_model=False)
                    ),
                    name="noroute",
                    route_prefix="/noroute",
                )
                base = f"http://127.0.0.1:{port}"
                _wait_ready(f"{base}/health")
            except BaseException:
                _report_startup_failure()
                raise
            yield Stack(
                base,
                a,
                b,
                dead_port,
                f"http://127.0.0.1:{metrics_port}/metrics",
                routed_path,
                routed_config(a, b, dead_port),
            )
        finally:
            serve.shutdown()
            ray.shutdown()
