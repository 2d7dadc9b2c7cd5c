"""Models of the user's own as routing bindings, on the real Ray graph (docs/model-runtime.md
"Bindings to your own models"): the `domain` signal reads a sequence classifier from a local
directory (a tiny random BERT written by the test, tests/fakes/tiny_models.py), MoM requests
sent with the OpenAI SDK are routed by its labels, a PATCH with If-Match swaps it for another
directory under load with no failed request (nor one sent to another Ray instance on the machine),
and a directory that does not load leaves the old model serving. The `pii_classifier` binding reads a token classifier the same way: its entity
types, mapped to PII types, block a request through the `pii` plugin, and a swap changes them.

The tiny models are random, so the expected route of each prompt (and the PII types of the
guarded prompt) is the model's own answer on it, computed here in process with the same loader
the worker uses. Each second model is the first's weights under other label names, mapped the
other way round: every answer flips when it serves, so the answers show which model answered.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.fakes.foreign_proxy import ForeignServeProxy
from tests.fakes.tiny_models import write_tiny_sequence_classifier, write_tiny_token_classifier
from tests.fakes.upstream import FakeUpstream
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

APP = "own-models"
PROMPTS = [
    "I was charged twice this month, please refund me",
    "my laptop will not start after the update",
    "what time is it in the city today",
    "the water in the house is cold and the light is off",
]
SWAPPED = {"first": "support", "second": "billing"}  # model b's labels, the other way round
DOMAIN = "global.model_catalog.modules.classifier.domain"
# The guarded decision's prompts (keyword `securechat`); the tagger's entity types, mapped.
GUARDED = [
    "securechat my name is anna and my mail is anna at home",
    "securechat call me at the office this week please",
    "securechat the user said his name in the email",
    "securechat send it to my house in the city",
]
TAGS_A = {"PER": "PERSON", "EMAIL": "EMAIL_ADDRESS"}
TAGS_B = {"NAME": "EMAIL_ADDRESS", "MAIL": "PERSON"}  # tagger b: tagger a's weights, swapped


@dataclass
class Models:
    a: Path  # labels billing, support
    b: Path  # a's weights, labels first, second
    broken: Path  # a's small files over a mismatched weight: passes validation, fails to load
    routes_a: list[str]  # each prompt's label by model a
    routes_b: list[str]  # ... by model b, mapped by SWAPPED
    tagger_a: Path  # entity types PER, EMAIL (BIO tags)
    tagger_b: Path  # tagger a's weights, types NAME, MAIL
    guarded: str  # a GUARDED prompt in which the tagger finds one type only
    types_a: set[str]  # the PII types tagger a finds in it, mapped by TAGS_A
    types_b: set[str]  # ... tagger b, mapped by TAGS_B


def _labels_of(directory: Path, mapping: dict[str, str] | None = None) -> list[str]:
    from app.runtime.registry import load_model

    model = load_model(str(directory))
    labels = [item.label or "" for item in model.classify(PROMPTS, {}).results]
    return [(mapping or {}).get(label, label) for label in labels]


def _types_of(directory: Path, text: str, mapping: dict[str, str]) -> set[str]:
    from app.runtime.registry import load_model

    (item,) = load_model(str(directory)).classify([text], {}).results
    return {mapping.get(span.label, span.label) for span in item.spans or []}


def _taggers(root: Path) -> tuple[Path, Path, str, set[str], set[str]]:
    """Two taggers and a guarded prompt whose answers differ (one type found, swapped)."""
    for seed in range(8):
        a = write_tiny_token_classifier(root / f"tagger-a{seed}", ["PER", "EMAIL"], seed=seed)
        b = write_tiny_token_classifier(root / f"tagger-b{seed}", ["NAME", "MAIL"], seed=seed)
        for text in GUARDED:
            types_a, types_b = _types_of(a, text, TAGS_A), _types_of(b, text, TAGS_B)
            if len(types_a) == 1 and types_a != types_b:
                return a, b, text, types_a, types_b
    raise AssertionError("no tiny tagger finds exactly one entity type in the guarded prompts")


def _mismatched(directory: Path) -> Path:
    """One encoder weight of another shape than config.json says: the small files (what
    validation reads) are whole, loading the weights fails."""
    from safetensors.torch import load_file, save_file

    weights = directory / "model.safetensors"
    tensors = load_file(weights)
    name = next(k for k in tensors if k.endswith("intermediate.dense.weight"))
    tensors[name] = tensors[name][:, :-1].contiguous()
    save_file(tensors, weights, metadata={"format": "pt"})
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    root = tmp_path_factory.mktemp("own-models")
    a = write_tiny_sequence_classifier(root / "intents-a", ["billing", "support"], seed=3)
    b = write_tiny_sequence_classifier(root / "intents-b", ["first", "second"], seed=3)
    broken = _mismatched(Path(shutil.copytree(a, root / "intents-broken")))
    routes_a, routes_b = _labels_of(a), _labels_of(b, SWAPPED)
    assert all(x != y for x, y in zip(routes_a, routes_b, strict=True))  # same weights, swapped names
    return Models(a, b, broken, routes_a, routes_b, *_taggers(root))


def own_config(a: FakeUpstream, b: FakeUpstream, artifact: Path, tagger: Path) -> dict[str, Any]:
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "general"},
            "models": [
                {"name": "billing-model", "backend_refs": [{"base_url": a.host_url}]},
                {"name": "support-model", "backend_refs": [{"base_url": b.host_url}]},
                {"name": "general", "backend_refs": [{"base_url": b.host_url}]},
            ],
        },
        "routing": {
            "signals": {
                "domains": [{"name": "billing"}, {"name": "support"}],
                "keywords": [{"name": "secure_words", "keywords": ["securechat"]}],
            },
            "decisions": [
                {
                    "name": name,
                    "priority": priority,
                    "rules": {"type": "domain", "name": name},
                    "modelRefs": [{"model": f"{name}-model"}],
                }
                for name, priority in (("billing", 20), ("support", 10))
            ]
            + [
                {
                    "name": "guarded",
                    "priority": 100,
                    "rules": {"type": "keyword", "name": "secure_words"},
                    "modelRefs": [{"model": "general"}],
                    "plugins": [{"type": "pii", "configuration": {"enabled": True, "threshold": 0.01}}],
                }
            ],
        },
        "model_deployments": {"intents": {"artifact": str(artifact)}, "tagger": {"artifact": str(tagger)}},
        "global": {
            "model_catalog": {
                "signal_timeout_ms": 10000,
                "modules": {
                    "classifier": {
                        "domain": {"deployment": "intents"},
                        # any span counts: a random tagger's probabilities are low
                        "pii": {"deployment": "tagger", "threshold": 0.01, "labels": TAGS_A},
                    }
                },
            },
            "stores": {"response_cache": {"enabled": False}},
        },
    }


@contextmanager
def served(stack: Stack, app: str, config_path: Path) -> Iterator[str]:
    """The graph of `config_path` as application `app`, once ready: its URL."""
    from ray import serve

    from deployments.graph import GraphArgs, build_app

    serve.run(
        build_app(GraphArgs(config_path=str(config_path), metrics={"enabled": False}, decision_model=False)),
        name=app,
        route_prefix=f"/{app}",
    )
    try:
        url = f"{stack.base_url}/{app}"
        deadline = time.monotonic() + 180  # the Router starts its worker before it serves
        while httpx.get(f"{url}/ready", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the application never became ready"
            time.sleep(0.5)
        yield url
    finally:
        serve.delete(app)


@pytest.fixture(scope="module")
def base(stack: Stack, models: Models, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("own-config") / "own.yaml"
    with FakeUpstream(name="billing") as a, FakeUpstream(name="support") as b:
        path.write_text(yaml.safe_dump(own_config(a, b, models.a, models.tagger_a)))
        with served(stack, APP, path) as url:
            yield url


def routes(base: str, prompts: list[str] = PROMPTS) -> list[str]:
    """The decision of each prompt, asked through the OpenAI SDK."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    out = []
    for prompt in prompts:
        answer = client.chat.completions.with_raw_response.create(
            model="MoM", messages=[{"role": "user", "content": prompt}]
        )
        decision = answer.headers["x-vsr-selected-decision"]
        assert answer.headers["x-selected-model"] == f"{decision}-model"
        out.append(decision)
    return out


class Load:
    """A client sending `prompts` back to back through the SDK until stopped; each answer's
    decision is recorded ("" when the default model answered)."""

    def __init__(self, base: str, prompts: list[str] = PROMPTS) -> None:
        self.prompts = prompts
        self.client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
        self.stop = threading.Event()
        self.answered: list[tuple[float, str]] = []
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            prompt = self.prompts[i % len(self.prompts)]
            i += 1
            try:
                answer = self.client.chat.completions.with_raw_response.create(
                    model="MoM", messages=[{"role": "user", "content": prompt}]
                )
                self.answered.append((time.monotonic(), answer.headers.get("x-vsr-selected-decision", "")))
            except Exception as exc:  # every failure counts
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> Load:
        self.thread.start()
        deadline = time.monotonic() + 60
        while len(self.answered) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def patch(base: str, body: dict[str, Any]) -> httpx.Response:
    etag = httpx.get(f"{base}/api/v1/config", timeout=30).headers["etag"]
    return httpx.patch(f"{base}/api/v1/config", json=body, headers={"If-Match": etag}, timeout=180)


def to_model(artifact: Path, labels: dict[str, str] | None = None) -> dict[str, Any]:
    domain: dict[str, Any] = {"deployment": "intents", "labels": labels}
    return {
        "model_deployments": {"intents": {"artifact": str(artifact)}},
        "global": {"model_catalog": {"modules": {"classifier": {"domain": domain}}}},
    }


def version(base: str) -> int:
    return int(httpx.get(f"{base}/api/v1/config/hash", timeout=30).json()["config_version"])


def test_mom_requests_are_routed_by_the_model_directory(base: str, models: Models) -> None:
    assert routes(base) == models.routes_a


def test_a_directory_or_label_set_that_does_not_fit_is_refused_at_validate(
    base: str, models: Models, tmp_path: Path
) -> None:
    before = version(base)
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    refused = patch(base, to_model(empty))
    assert refused.status_code == 400, refused.text
    reasons = {r["path"]: r for r in refused.json()["error"]["details"]["reasons"]}
    assert str(empty) in reasons["model_deployments.intents.artifact"]["message"]
    # model b's labels are first / second: unmapped, they stand for no domain rule
    unmapped = patch(base, to_model(models.b))
    assert unmapped.status_code == 400, unmapped.text
    paths = {r["path"] for r in unmapped.json()["error"]["details"]["reasons"]}
    assert paths == {f"{DOMAIN}.labels.first", f"{DOMAIN}.labels.second"}
    wrong = patch(base, to_model(models.b, {"first": "support", "third": "billing"}))
    assert wrong.status_code == 400, wrong.text
    messages = {r["path"]: r["message"] for r in wrong.json()["error"]["details"]["reasons"]}
    assert "has no label 'third'" in messages[f"{DOMAIN}.labels.third"]
    assert version(base) == before  # nothing persisted
    assert routes(base) == models.routes_a


def test_a_patch_swaps_the_model_under_load_without_a_failed_request(base: str, models: Models) -> None:
    before = version(base)
    with Load(base) as load:
        started = time.monotonic()
        swapped = patch(base, to_model(models.b, SWAPPED))
        ended = time.monotonic()
        count = len(load.answered)
        while len(load.answered) < count + 8 and time.monotonic() < ended + 60:
            time.sleep(0.02)
    assert swapped.status_code == 200, swapped.text
    assert swapped.json()["status"] == "active" and version(base) == before + 1
    assert load.failures == [], load.failures[:3]
    during = [decision for at, decision in load.answered if started <= at <= ended]
    after = [decision for at, decision in load.answered if at > ended]
    expected_after = dict(zip(PROMPTS, models.routes_b, strict=True))
    assert after and set(after) <= set(expected_after.values())
    assert routes(base) == models.routes_b
    print(f"\nswap {ended - started:.2f} s; {len(during)} requests answered during it, 0 failed")


def test_requests_sent_during_activations_all_get_answers(base: str, models: Models) -> None:
    """While an activation reconfigures the only Ingress replica, HAProxy has no replica of the
    app to send to and passes requests to this Ray instance's fallback proxy (docs/management-api.md
    "In the Ray graph"). Another Ray instance on the machine binds Serve's default fallback port
    too, with SO_REUSEPORT: on Serve's defaults some of those requests reached it and got its 404."""
    with ForeignServeProxy() as other, Load(base) as first, Load(base, PROMPTS[::-1]) as second:
        for target in (to_model(models.a), to_model(models.b, SWAPPED)):  # b (the test above) -> a -> b
            swapped = patch(base, target)
            assert swapped.status_code == 200 and swapped.json()["status"] == "active", swapped.text
    failures = first.failures + second.failures
    answered = len(first.answered) + len(second.answered)
    kinds = Counter(failure.split(" - ")[0] for failure in failures)  # e.g. "NotFoundError: Error code: 404"
    assert failures == [], (
        f"{len(failures)} of {answered + len(failures)} failed: {dict(kinds)}",
        failures[:2],
    )
    assert [path for path in other.requests if path.startswith(f"/{APP}/")] == []  # none of ours
    assert routes(base) == models.routes_b
    print(f"\n2 activations: {answered} requests answered, 0 failed")


def guarded_types(base: str, text: str) -> set[str]:
    """The PII types the `pii` plugin blocks `text` for, through the SDK (403 expected)."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(openai.PermissionDeniedError) as blocked:
        client.chat.completions.create(model="MoM", messages=[{"role": "user", "content": text}])
    error = blocked.value.body if isinstance(blocked.value.body, dict) else {}
    error = error.get("error", error)
    assert error["code"] == "pii_detected", error
    return set(error["details"]["entities_found"])


def test_a_token_classifier_guards_by_its_mapped_entity_types(base: str, models: Models) -> None:
    assert guarded_types(base, models.guarded) == models.types_a


def test_a_patch_swaps_the_pii_model_under_load(base: str, models: Models) -> None:
    # a merge patch: tagger a's label names are deleted (null), tagger b's added
    labels: dict[str, str | None] = {**dict.fromkeys(TAGS_A), **TAGS_B}
    pii = {"deployment": "tagger", "threshold": 0.01, "labels": labels}
    body = {
        "model_deployments": {"tagger": {"artifact": str(models.tagger_b)}},
        "global": {"model_catalog": {"modules": {"classifier": {"pii": pii}}}},
    }
    with Load(base) as load:
        started = time.monotonic()
        swapped = patch(base, body)
        took = time.monotonic() - started
    assert swapped.status_code == 200 and swapped.json()["status"] == "active", swapped.text
    assert load.failures == [], load.failures[:3]
    assert guarded_types(base, models.guarded) == models.types_b
    print(f"\npii swap {took:.2f} s; {len(load.answered)} requests answered, 0 failed")


def test_a_model_that_fails_to_load_leaves_the_old_one_serving(base: str, models: Models) -> None:
    serving = routes(base)
    with Load(base) as load:
        started = time.monotonic()
        failed = patch(base, to_model(models.broken))
        took = time.monotonic() - started
    assert failed.status_code == 503, failed.text
    body = failed.json()
    assert body["status"] == "activation_failed"
    assert load.failures == [], load.failures[:3]
    record = httpx.get(f"{base}/api/v1/config/hash", timeout=30).json()["activation"]
    assert record["state"] == "failed"
    why = " ".join(r["message"] for r in record["reasons"])
    assert "model deployment intents did not load" in why and str(models.broken) in why
    assert routes(base) == serving  # the previous model answers
    print(f"\nfailed swap answered in {took:.2f} s; {len(load.answered)} requests answered, 0 failed")
