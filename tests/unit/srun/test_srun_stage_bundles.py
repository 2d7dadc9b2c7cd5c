"""Router-side question bundling (app/srun/stage.py; the contract's router-side stage calls,
"Router metrics"), against a fake worker: a real HTTP server on 127.0.0.1 answering /v1/classify
and /v1/bundle (the worker's own run_bundle), attached as a deployment's endpoint. Several
families bound to one deployment go as one bundle; each question gets its own task's answer or
error; the stage-call rounds and bundle waits are recorded."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app.config.errors import ConfigError
from app.config.loader import parse_config
from app.pipeline import PipelineServices, RouterPipeline
from app.runtime.schemas import InvalidRequest
from app.srun.bundle import run_bundle
from app.srun.hosting import ManagedRuntimes
from app.srun.stage import MAX_BUNDLE_TASKS, enter_stage
from app.srun.timing import ServerTiming
from app.srun.worker import failure_status
from tests.unit.srun.test_runtime_bindings import FakeEmbed, chat, document

SERVED = "labels-model"
CALLS = "svc_model_runtime_stage_decision_calls_total"
QUESTION_WAIT = "svc_model_runtime_bundle_question_wait_seconds"
BUNDLE_WAIT = "svc_model_runtime_bundle_wait_seconds"


def scores(text: str) -> dict[str, float]:
    return {
        "needs_fact_check": 0.9 if "when was" in text else 0.1,
        "wrong_answer": 0.8 if "wrong" in text else 0.0,
        "code": 0.95 if "python" in text else 0.02,
        "image": 0.0,
        "jailbreak": 0.97 if "ignore previous" in text else 0.01,
    }


async def classify(surface: str, body: dict[str, Any], timing: ServerTiming) -> tuple[dict[str, Any], None]:
    """The fake model: label scores by text; input "boom" is an invalid request (400)."""
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    if "boom" in texts:
        raise InvalidRequest("input: boom")
    results = [
        {"index": i, "probabilities": scores(t), "scores": scores(t), "echo": t} for i, t in enumerate(texts)
    ]
    return {"model": body["model"], "results": results, "usage": {"tokens": 3}}, None


class FakeWorker:
    """Records each request (path, body); `status` set: every request answers that error."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.status: int | None = None
        self.lock = threading.Lock()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append((path, body))
        if self.status is not None:
            return self.status, {"error": {"code": "overloaded", "message": "queue full"}}
        try:
            if path == "/v1/bundle":
                bundle = asyncio.run(
                    run_bundle(body, classify, failure_status, MAX_BUNDLE_TASKS, ServerTiming())
                )
                return 200, bundle.model_dump(mode="json", exclude_none=True)
            return 200, asyncio.run(classify("classify", body, ServerTiming()))[0]
        except Exception as exc:  # the worker's error body
            status, code, message = failure_status(exc)
            return status, {"error": {"code": code, "message": message}}

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[FakeWorker, str]]:
    worker = FakeWorker()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            status, answer = worker.answer(self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield worker, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def worker(server: tuple[FakeWorker, str]) -> FakeWorker:
    server[0].requests.clear()
    server[0].status = None
    return server[0]


CATALOG: dict[str, Any] = {
    "signal_timeout_ms": 5000,
    "modules": {
        "prompt_guard": {"enabled": True, "threshold": 0.5, "deployment": "labels"},
        "classifier": {"fact_check": {"deployment": "labels"}},
        "feedback_detector": {"deployment": "labels", "contract": "label_scores"},
        "modality_detector": {"deployment": "labels"},
    },
}


# Questions gathered together reach the stage within microseconds, well inside the default 2 ms
# window; on a loaded test machine their tasks can start further apart, so the tests that count
# bundles give the window its most (the grouping, not the window's length, is what they check).
GROUPED: dict[str, Any] = {"bundle_window_ms": 50}


def labels_document(endpoint: str, **catalog: Any) -> dict[str, Any]:
    doc = document({**CATALOG, **catalog})
    doc["model_deployments"] = {
        "labels": {"artifact": "acme/labels", "endpoint": endpoint, "served_name": SERVED}
    }
    signals = doc["routing"]["signals"]
    signals["fact_check"] = [{"name": "needs_fact_check", "threshold": 0.5}]
    signals["user_feedbacks"] = [{"name": "wrong_answer"}]
    signals["modality"] = [{"name": "code"}]
    doc["routing"]["decisions"] = [
        {"name": n, "priority": p, "rules": {"type": t, "name": r}, "modelRefs": [{"model": "large"}]}
        for n, p, t, r in (
            ("facts", 50, "fact_check", "needs_fact_check"),
            ("redo", 40, "user_feedback", "wrong_answer"),
            ("coding", 30, "modality", "code"),
        )
    ]
    return doc


def pipeline(endpoint: str, **catalog: Any) -> tuple[RouterPipeline, ManagedRuntimes]:
    config = parse_config(labels_document(endpoint, **catalog)).config
    runtimes = ManagedRuntimes.from_config(config)  # attached to the fake: nothing is started
    services = PipelineServices(embed=FakeEmbed(), bound_workers=runtimes)
    return RouterPipeline(config, services, rng=random.Random(0)), runtimes


def count(runtimes: ManagedRuntimes, name: str) -> float:
    return runtimes.metrics.value(name + "_count")


async def test_a_stage_s_questions_to_one_deployment_go_as_one_bundle(server, worker):
    pipe, runtimes = pipeline(server[1], **GROUPED)
    plan = await pipe.route(chat("when was python released"))
    assert worker.paths() == ["/v1/bundle"]
    tasks = worker.requests[0][1]["tasks"]
    # the three label families and the global prompt guard, each its own classify task
    assert len(tasks) == 4 and all(t["classify"]["model"] == SERVED for t in tasks)
    assert sorted(t["classify"]["options"]["overflow"] for t in tasks) == ["truncate"] * 3 + ["window"]
    assert 1 <= worker.requests[0][1]["options"]["deadline_ms"] <= 5000
    assert plan.immediate is None and plan.decision == "facts"  # the answers went back per question
    matched = {m.name for m in plan.signals.matches if m.matched}
    assert matched == {"needs_fact_check", "code"} and not plan.signals.errors
    m = runtimes.metrics
    assert m.value(CALLS, deployment="labels", round="first") == 1
    assert m.value(CALLS, deployment="labels", round="later") == 0
    assert count(runtimes, BUNDLE_WAIT) == 1 and count(runtimes, QUESTION_WAIT) == 4
    bundle_wait, question_waits = m.value(BUNDLE_WAIT + "_sum"), m.value(QUESTION_WAIT + "_sum")
    # the bundle waited as long as its first question; every question at most that long
    assert 0 <= question_waits <= 4 * bundle_wait < 4 * 1.0
    assert m.value("svc_model_runtime_requests_total", deployment="labels", outcome="ok") == 1


async def signals(runtimes: ManagedRuntimes, inputs: list[str]) -> list[Any]:
    """One stage's signal calls, one per input, issued concurrently."""
    enter_stage()
    return list(
        await asyncio.gather(*(runtimes.signal("labels", "classify", {"input": [t]}, None) for t in inputs))
    )


async def test_each_question_gets_its_own_task_and_a_failed_task_fails_only_its_own(server, worker):
    _, runtimes = pipeline(server[1], **GROUPED)
    first, failed, third = await signals(runtimes, ["alpha", "boom", "gamma"])
    assert worker.paths() == ["/v1/bundle"]
    assert first.state == "ok" and first.answer["results"][0]["echo"] == "alpha"
    assert third.state == "ok" and third.answer["results"][0]["echo"] == "gamma"
    assert (failed.state, failed.error) == ("error", "invalid_request")  # as that call alone


async def test_a_failed_bundle_call_fails_each_question_as_that_call_would(server, worker):
    _, runtimes = pipeline(server[1], **GROUPED)
    worker.status = 429
    results = await signals(runtimes, ["alpha", "beta"])
    assert worker.paths() == ["/v1/bundle"]  # one replica: no other to spread the 429 to
    assert [(r.state, r.error) for r in results] == [("error", "overloaded")] * 2
    assert (
        runtimes.metrics.value("svc_model_runtime_requests_total", deployment="labels", outcome="overloaded")
        == 1
    )


async def test_a_lone_question_goes_as_its_own_call(server, worker):
    _, runtimes = pipeline(server[1])
    (only,) = await signals(runtimes, ["alpha"])
    assert only.state == "ok" and worker.paths() == ["/v1/classify"]
    assert worker.requests[0][1]["model"] == SERVED
    assert runtimes.metrics.value(CALLS, deployment="labels", round="first") == 1
    assert count(runtimes, BUNDLE_WAIT) == 1 and count(runtimes, QUESTION_WAIT) == 1  # a bundle of one


async def test_more_questions_than_a_bundle_holds_go_as_several_bundles(server, worker):
    _, runtimes = pipeline(server[1], **GROUPED)
    inputs = [f"q{i}" for i in range(MAX_BUNDLE_TASKS + 6)]
    results = await signals(runtimes, inputs)
    assert [r.answer["results"][0]["echo"] for r in results] == inputs
    assert sorted(len(body["tasks"]) for _, body in worker.requests) == [6, MAX_BUNDLE_TASKS]
    m = runtimes.metrics
    assert (
        m.value(CALLS, deployment="labels", round="first"),
        m.value(CALLS, deployment="labels", round="later"),
    ) == (1, 1)
    assert count(runtimes, BUNDLE_WAIT) == 2 and count(runtimes, QUESTION_WAIT) == len(inputs)


async def test_a_question_after_the_send_is_a_later_call(server, worker):
    _, runtimes = pipeline(server[1])
    enter_stage()
    await runtimes.signal("labels", "classify", {"input": ["alpha"]}, None)
    await runtimes.signal("labels", "classify", {"input": ["beta"]}, None)
    m = runtimes.metrics
    assert (
        m.value(CALLS, deployment="labels", round="first"),
        m.value(CALLS, deployment="labels", round="later"),
    ) == (1, 1)
    assert worker.paths() == ["/v1/classify", "/v1/classify"]


async def test_a_zero_window_sends_each_question_alone(server, worker):
    pipe, runtimes = pipeline(server[1], bundle_window_ms=0)
    plan = await pipe.route(chat("when was python released"))
    assert plan.decision == "facts"
    assert worker.paths() == ["/v1/classify"] * 4
    m = runtimes.metrics
    assert (
        m.value(CALLS, deployment="labels", round="first"),
        m.value(CALLS, deployment="labels", round="later"),
    ) == (1, 3)
    assert count(runtimes, BUNDLE_WAIT) == 0 and count(runtimes, QUESTION_WAIT) == 0


async def test_outside_a_stage_a_call_is_sent_alone_and_not_counted(server, worker):
    _, runtimes = pipeline(server[1])
    await asyncio.gather(*(runtimes.signal("labels", "classify", {"input": [t]}, None) for t in ("a", "b")))
    assert worker.paths() == ["/v1/classify"] * 2
    assert runtimes.metrics.value(CALLS, deployment="labels", round="first") == 0


@pytest.mark.parametrize("window", [-1, 51, "2", True])
def test_the_window_is_checked(window):
    with pytest.raises(ConfigError) as err:
        parse_config(labels_document("http://127.0.0.1:9", bundle_window_ms=window))
    assert "bundle_window_ms" in str(err.value)


def test_the_window_defaults_to_2_ms():
    _, runtimes = pipeline("http://127.0.0.1:9")
    assert runtimes.settings.model_catalog.bundle_window_ms == 2.0
    _, off = pipeline("http://127.0.0.1:9", bundle_window_ms=0)
    assert off.settings.model_catalog.bundle_window_ms == 0
