"""Router-side hosting of the decision model and managed runtimes, without Ray or workers: the
frontend's native decision routes (create_app) over the Ingress's handle adapter, the config
keys (docs/model-runtime.md), runtime metrics on the router's metrics endpoint, and the signal rules."""

from __future__ import annotations

import pickle
from typing import Any

import httpx
import pytest
from ray.exceptions import RayTaskError
from ray.serve._private.common import DeploymentID
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

from app.api.app import StaticConfigView, create_app
from app.config.errors import ConfigError
from app.config.loader import parse_config
from app.observability.metrics import MetricsAggregator, MetricsRecorder
from app.runtime.schemas import InvalidRequest, ModelNotFound, NotReady
from app.srun.client import RuntimeCallError
from app.srun.decision_source import ClientDecisionSource
from app.srun.hosting import ManagedRuntimes, on_unscanned, runtime_settings
from app.srun.runtime_metrics import RuntimeMetrics
from app.srun.schemas import RejectedInput
from app.srun.settings import SrunEnvironment
from app.upstream.client import UpstreamClient
from deployments.decision_model import HandleDecisionSource

QUESTION = {
    "type": "choice",
    "criteria": {"billing": "payments and refunds", "shipping": "delivery and tracking"},
}
MODELS = {"providers": {"models": [{"name": "m", "backend_refs": [{"endpoint": "127.0.0.1:9"}]}]}}
ANSWER = {
    "model": "decision-model",
    "answers": {"q": {"type": "choice", "choice": "billing"}},
    "usage": {"tokens": 3},
}


def document(**extra: Any) -> dict[str, Any]:
    return {"version": "v0.3", **MODELS, **extra}


# -- the frontend's routes over the DecisionModel handle -----------------------------------


class _Method:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def remote(self, *args: Any) -> Any:
        async def call() -> Any:
            if isinstance(self.outcome, BaseException):
                raise self.outcome
            return self.outcome

        return call()


class FakeHandle:
    """What HandleDecisionSource sees of a DeploymentHandle: `handle.<method>.remote(...)`."""

    def __init__(self, decide: Any, models: Any = None) -> None:
        self.decide = _Method(decide)
        self.models = _Method(models if models is not None else [{"name": "decision-model"}])


def replica_error(cause: Exception) -> RayTaskError:
    return RayTaskError("DecisionModel.decide", "Traceback ...", cause).as_instanceof_cause()


def frontend(handle: FakeHandle | None) -> httpx.AsyncClient:
    config = StaticConfigView(parse_config(document()).config)
    app = create_app(
        None,
        UpstreamClient(),
        config,  # type: ignore[arg-type]
        decisions=HandleDecisionSource(handle) if handle is not None else None,
    )  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://router")


async def test_the_frontend_publishes_the_native_decision_api_over_the_handle():
    async with frontend(FakeHandle(ANSWER)) as client:
        for path in ("/v1/decisions", "/v1/systemone"):
            response = await client.post(path, json={"state": "refund me", "questions": {"q": QUESTION}})
            assert response.status_code == 200 and response.json() == ANSWER
        models = await client.get("/v1/systemone/models")
        assert models.json() == {"object": "list", "data": [{"name": "decision-model"}]}


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (replica_error(InvalidRequest("questions.q.criteria: 1 option; needs 2")), 400, "invalid_request"),
        (
            replica_error(RejectedInput("images unsupported", "modality_not_supported")),
            400,
            "invalid_request",
        ),
        (replica_error(ModelNotFound("model 'x' is not served here")), 404, "model_not_found"),
        (replica_error(RuntimeCallError(429, "overloaded", "queue of 256 full", 1.0)), 429, "overloaded"),
        (replica_error(NotReady("decision model not loaded (FileNotFoundError)")), 503, "not_ready"),
        (
            replica_error(RuntimeCallError(504, "timeout", "no answer before the deadline")),
            504,
            "systemone_deadline_exceeded",
        ),
        (BackPressureError(num_queued_requests=10, max_queued_requests=10), 429, "overloaded"),
        (DeploymentUnavailableError(DeploymentID(name="DecisionModel", app_name="svc-sr")), 503, "not_ready"),
        (replica_error(ZeroDivisionError("a bug")), 500, "internal_error"),
    ],
)
@pytest.mark.slow
async def test_replica_errors_keep_their_status_and_only_public_words(error, status, code):
    async with frontend(FakeHandle(error)) as client:
        response = await client.post("/v1/decisions", json={"state": "x", "questions": {"q": QUESTION}})
    assert response.status_code == status
    body = response.json()
    assert body["error"]["code"] == code and set(body["error"]) == {"code", "message"}
    for private in ("1 option", "queue of 256", "FileNotFoundError", "a bug", "no answer", "not served here"):
        assert private not in body["error"]["message"]
    if status in (429, 503):
        assert response.headers["retry-after"] == {429: "1", 503: "5"}[status]


async def test_without_a_decision_model_the_routes_answer_not_ready():
    async with frontend(None) as client:
        response = await client.post("/v1/decisions", json={"state": "x", "questions": {"q": QUESTION}})
        assert response.status_code == 503 and response.json()["error"]["code"] == "not_ready"
        assert (await client.get("/v1/systemone/models")).json()["data"] == []


def test_errors_cross_process_boundaries_intact():
    call = pickle.loads(pickle.dumps(RuntimeCallError(429, "overloaded", "busy", 1.0)))
    assert (call.status, call.code, call.message, call.retry_after) == (429, "overloaded", "busy", 1.0)
    rejected = pickle.loads(pickle.dumps(RejectedInput("too long", "video_too_long", 30)))
    assert (rejected.status, rejected.reason, rejected.limit, rejected.message) == (
        400,
        "video_too_long",
        30,
        "too long",
    )


# -- configuration -------------------------------------------------------------------------

RUNTIME = {
    "model_deployments": {
        "dm": {
            "provider": "model_runtime",
            "artifact": "decision-model",
            "process": "shared",
            "input": {"overflow": "window", "max_tokens": 4096},
        },
        "guard": {"artifact": "jailbreak-guard", "process": "shared"},
        "remote": {
            "artifact": "domain-classifier",
            "endpoint": "http://10.0.0.5:8100",
            "served_name": "domain",
        },
    },
    "decision_model": {"deployment": "dm"},
    "global": {
        "model_catalog": {"signal_timeout_ms": 750, "modules": {"prompt_guard": {"on_unscanned": "allow"}}}
    },
}


def test_the_canonical_config_takes_spec_2_runtime_keys():
    config = parse_config(document(**RUNTIME)).config
    settings = runtime_settings(config)
    assert settings.decision_model is not None and settings.decision_model.deployment == "dm"
    assert settings.signal_timeout_ms == 750 and settings.model_deployments["remote"].managed is False
    assert on_unscanned(config, "prompt_guard") == "allow" and on_unscanned(config, "pii") == "block"
    again = parse_config(config.to_document()).config  # round trip through the stored document
    assert again.model_deployments == config.model_deployments


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"decision_model": {"deployment": "nope"}}, "decision_model.deployment"),
        (
            {
                "model_deployments": {
                    "dm": {"artifact": "decision-model", "process": "p", "endpoint": "http://x"}
                }
            },
            "model_deployments.dm",
        ),
        (
            {"model_deployments": {"dm": {"artifact": "decision-model", "revision": "main"}}},
            "model_deployments.dm.revision",
        ),
        (
            {"model_deployments": {"dm": {"artifact": "decision-model", "colour": "blue"}}},
            "model_deployments.dm.colour",
        ),
        (
            {"model_deployments": {"dm": {"artifact": "x", "provider": "openai"}}},
            "model_deployments.dm.provider",
        ),
        ({"global": {"model_catalog": {"signal_timeout_ms": "soon"}}}, "signal_timeout_ms"),
        (
            {"global": {"model_catalog": {"modules": {"classifier": {"pii": {"on_unscanned": "ignore"}}}}}},
            "modules.classifier.pii.on_unscanned",
        ),
    ],
)
def test_bad_runtime_keys_are_rejected_with_their_path(change, path):
    with pytest.raises(ConfigError) as err:
        parse_config(document(**change))
    assert path in str(err.value)


def test_the_flat_layout_keeps_runtime_keys_in_place():
    loaded = parse_config(
        {
            "vllm_endpoints": [{"name": "e", "address": "127.0.0.1", "port": 8000, "models": ["m"]}],
            "default_model": "m",
            "model_deployments": {"dm": {"artifact": "decision-model"}},
            "decision_model": {"deployment": "dm"},
        }
    )
    assert loaded.legacy and loaded.config.decision_model is not None
    assert list(loaded.config.model_deployments) == ["dm"]
    assert not any("model_deployments" in w or "decision_model" in w for w in loaded.warnings)


# -- metrics on the router's endpoint ------------------------------------------------------


def test_runtime_metrics_reach_the_router_aggregator_with_ready_as_max():
    first, second = RuntimeMetrics(), RuntimeMetrics()
    for metrics, replica in ((first, "a/0"), (second, "b/0")):
        metrics.set("svc_model_runtime_ready", 1.0, deployment="dm")
        metrics.set("svc_model_runtime_replica_ready", 1.0, deployment="dm", replica=replica)
        metrics.add("svc_model_runtime_replica_inflight", 1, deployment="dm", replica="0")
        metrics.record_call("dm", replica, "decisions", "ok", 0.004)
    first.record_call("dm", "a/0", "decisions", "timeout", 30.0, replica_outcome="canceled")
    aggregator = MetricsAggregator()
    aggregator.push(first.recorder.snapshot("DecisionModel/a"))
    aggregator.push(second.recorder.snapshot("DecisionModel/b"))
    assert (
        aggregator.value("svc_model_runtime_ready", deployment="dm") == 1.0
    )  # not 2: either replica is ready
    assert aggregator.value("svc_model_runtime_replica_inflight", deployment="dm", replica="0") == 2.0
    assert aggregator.value("svc_model_runtime_requests_total", deployment="dm", outcome="ok") == 2.0
    assert (
        aggregator.value(
            "svc_model_runtime_replica_requests_total", deployment="dm", replica="a/0", outcome="canceled"
        )
        == 1.0
    )
    text = aggregator.render()
    assert 'svc_model_runtime_request_duration_seconds_count{deployment="dm",surface="decisions"} 3' in text
    assert "# TYPE svc_model_runtime_restarts_total counter" in text
    assert (
        first.value("svc_model_runtime_request_duration_seconds_count", deployment="dm", surface="decisions")
        == 2
    )


def test_recorder_gauges_move_both_ways():
    recorder = MetricsRecorder()
    recorder.add("svc_model_runtime_replica_inflight", 2, deployment="d", replica="0")
    recorder.add("svc_model_runtime_replica_inflight", -1, deployment="d", replica="0")
    assert recorder.value("svc_model_runtime_replica_inflight", deployment="d", replica="0") == 1.0


# -- managed runtimes: what a host serves through them (no process started) ----------------


class FakeClient:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, Any, float | None]] = []

    async def call(
        self, method: str, path: str, body: Any = None, *, surface: str, deadline_s: float | None = None
    ) -> dict[str, Any]:
        self.calls.append((path, body, deadline_s))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome  # type: ignore[no-any-return]

    async def decisions(self, body: dict[str, Any], deadline_s: float | None = None) -> dict[str, Any]:
        return await self.call("POST", "/v1/decisions", body, surface="decisions", deadline_s=deadline_s)

    async def models(self) -> dict[str, Any]:
        return {
            "data": [
                {"name": "decision-model", "surfaces": ["decisions"]},
                {"name": "jailbreak-guard", "surfaces": ["classify"]},
            ]
        }


@pytest.fixture()
def runtimes(tmp_path):
    settings = runtime_settings(parse_config(document(**RUNTIME)).config)
    env = SrunEnvironment(command=["svc-srun"], dir=tmp_path, cpu_threads=1)
    return ManagedRuntimes(settings, env, deployments=["dm", "guard"])


def test_a_host_runs_only_its_deployments(runtimes):
    assert sorted(runtimes.supervisor.replicas) == ["dm", "guard"]
    assert [s.models for s in runtimes.supervisor.process_specs()] == [["decision-model", "jailbreak-guard"]]
    assert runtimes.decision_deployment == "dm"
    with pytest.raises(KeyError):
        ManagedRuntimes(runtimes.settings, runtimes.supervisor.env, deployments=["absent"])


async def test_decisions_through_the_decision_deployment(runtimes):
    fake = FakeClient(ANSWER)
    runtimes.supervisor.client_for = lambda deployment: fake  # type: ignore[method-assign]
    backend = runtimes.decision_source()
    assert backend is not None
    assert await backend.decide({"state": "x", "questions": {}}) == ANSWER
    assert await backend.decide({"model": "dm", "state": "x"}) == ANSWER  # the deployment key names it too
    await backend.decide({"model": "other", "state": "x"})
    models = [body["model"] for _, body, _ in fake.calls]
    assert models == ["decision-model", "decision-model", "other"]
    # the native API's budget less a tenth: the router answers 504 itself if the worker is slower
    assert {deadline for *_, deadline in fake.calls} == {27.0}
    assert [c["name"] for c in await backend.models()] == ["decision-model"]


async def test_signals_honour_signal_timeout_and_on_unscanned(runtimes):
    timeout = RuntimeCallError(504, "timeout", "no answer before the deadline")
    partial = {"results": [{"index": 0}], "usage": {"tokens": 256, "tokens_lower_bound": True}}
    cases = [
        (FakeClient({"usage": {"tokens": 4}}), {"safety": True}, ("ok", None)),
        (FakeClient(timeout), {"safety": True}, ("unscanned", True)),  # on_unscanned block
        (
            FakeClient(timeout),
            {"safety": True, "unscanned": "allow"},
            ("unscanned", False),
        ),  # follows on_error
        (
            FakeClient(timeout),
            {"safety": True, "unscanned": "allow", "on_error_matches": True},
            ("unscanned", True),
        ),
        (FakeClient(partial), {"safety": True}, ("unscanned", True)),  # read only in part
        (FakeClient(partial), {}, ("ok", None)),  # a routing signal uses what it read
        (FakeClient(timeout), {}, ("error", False)),  # routing signal: on_error decides
        (
            FakeClient(RuntimeCallError(503, "not_ready", "loading")),
            {"on_error_matches": True},
            ("error", True),
        ),
    ]
    for fake, options, (state, matches) in cases:
        runtimes.supervisor.client_for = lambda deployment, fake=fake: fake  # type: ignore[method-assign]
        result = await runtimes.signal("guard", "classify", {"input": "x"}, 20.0, **options)
        assert (result.state, result.matches) == (state, matches), options
        assert fake.calls[0][2] == 0.75  # signal_timeout_ms wins over the request's remaining time
    runtimes.settings.model_catalog.signal_timeout_ms = None
    assert (
        runtimes.signal_deadline_s(20.0) == pytest.approx(18.0) and runtimes.signal_deadline_s(None) == 45.0
    )


async def test_a_client_backend_takes_a_client_or_a_picker():
    fake = FakeClient(ANSWER)
    direct = ClientDecisionSource(fake, "decision-model", deadline_s=2.0)
    picked = ClientDecisionSource(lambda: fake)
    assert await direct.decide({"state": "x"}) == ANSWER and await picked.decide({"state": "y"}) == ANSWER
    assert fake.calls[0][1]["model"] == "decision-model" and "model" not in fake.calls[1][1]
    assert fake.calls[0][2] == 2.0


def test_deployments_nothing_calls_are_named_in_a_warning():
    loaded = parse_config(document(**RUNTIME))
    unused = [w for w in loaded.warnings if w.startswith("model_deployments.")]
    assert [w.split(":")[0] for w in unused] == ["model_deployments.guard", "model_deployments.remote"]


# -- a busy worker's 429: another replica first ------------------------------------------------------
BUSY = RuntimeCallError(429, "overloaded", "queue of 256 full", 1.0)


def two_attached_replicas(tmp_path: Any) -> ManagedRuntimes:
    replicas = [{"endpoint": "http://10.0.0.5:8100"}, {"endpoint": "http://10.0.0.6:8100"}]
    doc = document(
        model_deployments={
            "dm": {"artifact": "decision-model", "replicas": replicas},
            "one": {"artifact": "jailbreak-guard", "endpoint": "http://10.0.0.7:8100"},
        },
        decision_model={"deployment": "dm"},
    )
    settings = runtime_settings(parse_config(doc).config)
    return ManagedRuntimes(settings, SrunEnvironment(command=["svc-srun"], dir=tmp_path, cpu_threads=1))


def test_the_supervisor_names_another_replica(tmp_path):
    supervisor = two_attached_replicas(tmp_path).supervisor
    for _ in range(3):
        first = supervisor.client_for("dm")
        other = supervisor.other_client("dm", first)
        assert other is not None and other is not first
    assert supervisor.other_client("one", supervisor.client_for("one")) is None


async def test_a_busy_workers_429_tries_another_replica_before_it_is_passed_back(tmp_path):
    runtimes = two_attached_replicas(tmp_path)
    busy, free = FakeClient(BUSY), FakeClient(ANSWER)
    runtimes.supervisor.client_for = lambda deployment: busy  # type: ignore[method-assign]
    runtimes.supervisor.other_client = lambda deployment, than: free  # type: ignore[method-assign]
    backend = runtimes.decision_source()
    assert backend is not None
    assert await backend.decide({"state": "x", "questions": {}}) == ANSWER
    assert (await runtimes.signal("dm", "classify", {"text": "hi"}, None)).state == "ok"
    assert len(busy.calls) == 2 and len(free.calls) == 2

    runtimes.supervisor.other_client = lambda deployment, than: None  # type: ignore[method-assign]
    with pytest.raises(RuntimeCallError) as passed_back:  # the only replica: its 429 as it came
        await backend.decide({"state": "x", "questions": {}})
    assert passed_back.value.status == 429
    also_busy = FakeClient(BUSY)
    runtimes.supervisor.other_client = lambda deployment, than: also_busy  # type: ignore[method-assign]
    with pytest.raises(RuntimeCallError):  # one other replica, once
        await backend.decide({"state": "x", "questions": {}})
    assert len(also_busy.calls) == 1
    not_busy = FakeClient(RuntimeCallError(503, "not_ready", "loading"))
    runtimes.supervisor.client_for = lambda deployment: not_busy  # type: ignore[method-assign]
    runtimes.supervisor.other_client = lambda deployment, than: free  # type: ignore[method-assign]
    with pytest.raises(RuntimeCallError):  # only a 429 goes elsewhere
        await backend.decide({"state": "x", "questions": {}})
