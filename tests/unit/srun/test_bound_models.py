"""A binding to a model of the user's own (docs/model-runtime.md "Bindings to your own models"), without Ray
or workers: the `labels` map from the model's labels to signal names (checked against the
config, and against the model's own labels read from its directory), the bound family reading
the worker's answer in the mapped names, and a reload whose model fails to load."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from app.cli.remote import EXIT_INVALID
from app.common.supervisor import RestartPolicy
from app.config.errors import ConfigError
from app.config.loader import parse_config
from app.pipeline import PipelineServices, RouterPipeline
from app.srun.bound_models import bound_model_issues
from app.srun.hosting import BindingRuntimes, ManagedRuntimes, ModelLoadFailed
from app.srun.settings import SrunEnvironment
from tests.fakes.tiny_models import (
    write_tiny_cross_encoder,
    write_tiny_sequence_classifier,
    write_tiny_token_classifier,
)
from tests.unit.srun.test_runtime_bindings import FakeClient, FakeEmbed, chat, serve_with

INTENTS = "/models/intents"  # never read here: the fake worker answers for it
DOMAIN = ("global", "model_catalog", "modules", "classifier", "domain")


def intents_document(labels: dict[str, str] | None = None, **domain: Any) -> dict[str, Any]:
    """Two domain rules over a bound intent classifier whose labels are LABEL_0..2."""
    binding: dict[str, Any] = {"deployment": "intents", **domain}
    if labels is not None:
        binding["labels"] = labels
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "general"},
            "models": [
                {"name": "general", "backend_refs": [{"endpoint": "127.0.0.1:8000"}]},
                {"name": "billing-model", "backend_refs": [{"endpoint": "127.0.0.1:8001"}]},
                {"name": "support-model", "backend_refs": [{"endpoint": "127.0.0.1:8002"}]},
            ],
        },
        "routing": {
            "signals": {"domains": [{"name": "billing"}, {"name": "support", "mmlu_categories": ["tech"]}]},
            "decisions": [
                {
                    "name": "billing",
                    "priority": 20,
                    "rules": {"type": "domain", "name": "billing"},
                    "modelRefs": [{"model": "billing-model"}],
                },
                {
                    "name": "support",
                    "priority": 10,
                    "rules": {"type": "domain", "name": "support"},
                    "modelRefs": [{"model": "support-model"}],
                },
            ],
        },
        "model_deployments": {"intents": {"artifact": INTENTS}},
        "global": {"model_catalog": {"modules": {"classifier": {"domain": binding}}}},
    }


LABELS = {"LABEL_0": "billing", "LABEL_1": "tech", "LABEL_2": "other"}


def rejection(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(document)
    return {issue.path: issue.message for issue in caught.value.issues}


def test_a_label_map_names_only_declared_signal_names():
    config = parse_config(intents_document(LABELS)).config
    assert config.global_.model_catalog["modules"]["classifier"]["domain"]["labels"] == LABELS
    issues = rejection(intents_document({**LABELS, "LABEL_2": "refunds"}))
    path = ".".join((*DOMAIN, "labels", "LABEL_2"))
    assert list(issues) == [path]
    assert "'refunds' is no domain rule's category" in issues[path] and "billing" in issues[path]
    # the fallback category is a name a label may stand for, whatever it is called
    parse_config(intents_document({**LABELS, "LABEL_2": "misc"}, fallback_category="misc"))


def test_the_mmlu_warnings_are_not_given_for_a_model_of_ones_own():
    loaded = parse_config(intents_document(LABELS))
    assert not [w for w in loaded.warnings if "MMLU" in w], loaded.warnings


@pytest.mark.parametrize(
    ("module", "path"),
    [
        ({"prompt_guard": {"deployment": "intents", "labels": {"a": "b"}}}, "modules.prompt_guard.labels"),
        (
            {"classifier": {"fact_check": {"deployment": "intents", "labels": {}}}},
            "classifier.fact_check.labels",
        ),
    ],
)
def test_labels_apply_to_domain_and_pii_bindings_only(module, path):
    document = intents_document()
    document["global"]["model_catalog"]["modules"] = module
    with pytest.raises(ConfigError) as caught:
        parse_config(document)
    assert path in str(caught.value) and "labels maps the labels of a domain or pii model" in str(
        caught.value
    )


class IntentClient(FakeClient):
    """The intent model's worker: its own labels, LABEL_0 for money questions, else LABEL_1."""

    @staticmethod
    def _answer(model: str, text: str) -> dict[str, Any]:
        assert model == INTENTS
        billing = 0.85 if "refund" in text else 0.05
        probs = {"LABEL_0": billing, "LABEL_1": 0.9 - billing, "LABEL_2": 0.1}
        best = max(probs, key=probs.__getitem__)
        return {"label": best, "confidence": probs[best], "probabilities": probs}


def intents_pipeline(tmp_path, labels: dict[str, str]) -> RouterPipeline:
    config = parse_config(intents_document(labels)).config
    runtimes = ManagedRuntimes.from_config(
        config, env=SrunEnvironment(command=["svc-srun"], dir=tmp_path, cpu_threads=1)
    )
    serve_with(runtimes, IntentClient())
    return RouterPipeline(
        config, PipelineServices(embed=FakeEmbed(), bound_workers=runtimes), rng=random.Random(0)
    )


async def test_the_bound_model_routes_by_its_labels_in_the_mapped_names(tmp_path):
    pipe = intents_pipeline(tmp_path, LABELS)
    money = await pipe.route(chat("I want a refund for last month"))
    assert (money.decision, money.selected_model) == ("billing", "billing-model")
    match = next(m for m in money.signals.matches if m.name == "billing")
    assert match.detail["category"] == "billing" and match.confidence == pytest.approx(0.85)
    tech = await pipe.route(chat("my laptop will not boot"))
    assert (tech.decision, tech.selected_model) == ("support", "support-model")
    # two labels of one name add up: LABEL_0 and LABEL_1 both 'tech' outweigh nothing else
    merged = intents_pipeline(tmp_path, {"LABEL_0": "tech", "LABEL_1": "tech", "LABEL_2": "billing"})
    plan = await merged.route(chat("I want a refund for last month"))
    assert plan.decision == "support"
    top = next(m for m in plan.signals.matches if m.name == "support").detail["top"][0]
    assert top == {"category": "tech", "probability": pytest.approx(0.9)}


# -- a reload whose model fails to load ---------------------------------------------------------


async def test_a_reload_whose_model_fails_to_load_raises_why_and_stops_its_workers(tmp_path, monkeypatch):
    # a stand-in worker process; its /health is answered here: the model failed, not retried
    env = SrunEnvironment(
        command=[sys.executable, "-c", "import signal; signal.pause()"], dir=tmp_path, cpu_threads=1
    )
    host = BindingRuntimes("r1", env=env, grace_s=0.0, policy=RestartPolicy(stop_timeout_s=2.0))
    broken = parse_config(intents_document(LABELS)).config
    why = f"{INTENTS}: no config.json (not a model directory)"

    async def failed_health() -> dict[str, Any]:
        return {"status": "failed", "models": {INTENTS: {"status": "failed", "message": why}}}

    original = ManagedRuntimes.start

    async def start(self: ManagedRuntimes, wait: bool = True, timeout_s: float | None = None) -> bool:
        for replicas in self.supervisor.replicas.values():
            for replica in replicas:
                replica.client.__dict__["health"] = failed_health
        return await original(self, wait, timeout_s)

    monkeypatch.setattr(ManagedRuntimes, "start", start)
    try:
        started = time.monotonic()
        with pytest.raises(ModelLoadFailed, match="model deployment intents did not load: .*no config.json"):
            await host.update(broken, require_loaded=True)
        assert time.monotonic() - started < 10  # at once, not at SVC_SRUN_READY_TIMEOUT
        assert host._live == {}  # its workers are stopped, nothing left to retire
        # at start (no previous generation to keep) the replica comes up and the binding errs
        first = await host.update(broken)
        assert first is not None and first.supervisor.load_failures() == {"intents": why}
    finally:
        await host.stop()


# -- the model's own labels, read from its directory ------------------------------------------


def with_artifact(document: dict[str, Any], artifact: Path) -> dict[str, Any]:
    document["model_deployments"]["intents"]["artifact"] = str(artifact)
    return document


def issues_of(document: dict[str, Any]) -> dict[str, str]:
    return {i.path: i.message for i in bound_model_issues(parse_config(document).config)}


@pytest.fixture(scope="module")
def intent_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bound-models")
    labels = write_tiny_sequence_classifier(root / "intents", ["LABEL_0", "LABEL_1", "LABEL_2"])
    tagger = write_tiny_token_classifier(root / "tagger", ["PER", "EMAIL"])
    return labels, tagger


@pytest.mark.slow  # the module's tiny models: torch and transformers load (~13 s)
def test_a_bound_directory_is_read_against_the_label_map(intent_dirs):
    model, _ = intent_dirs
    assert issues_of(with_artifact(intents_document(LABELS), model)) == {}
    labels = ".".join((*DOMAIN, "labels"))
    # a label the model does not have; a model label left unmapped that no rule declares
    found = issues_of(with_artifact(intents_document({"LABEL_0": "billing", "LABEL_9": "tech"}), model))
    assert set(found) == {f"{labels}.LABEL_9", f"{labels}.LABEL_1", f"{labels}.LABEL_2"}
    assert f"the model at {model} has no label 'LABEL_9'" in found[f"{labels}.LABEL_9"]
    assert "answers 'LABEL_1', which maps to nothing the config declares" in found[f"{labels}.LABEL_1"]


@pytest.mark.slow  # the module's tiny models: torch and transformers load (~13 s)
def test_a_directory_that_cannot_load_or_answers_another_task_is_refused(intent_dirs, tmp_path):
    _, tagger = intent_dirs
    missing = tmp_path / "nothing-here"
    found = issues_of(with_artifact(intents_document(LABELS), missing))
    assert (
        list(found) == ["model_deployments.intents.artifact"]
        and str(missing) in found["model_deployments.intents.artifact"]
    )
    found = issues_of(with_artifact(intents_document(), tagger))
    assert list(found) == [".".join((*DOMAIN, "deployment"))]
    assert "answers token_spans; the domain_classifier binding reads label_probabilities" in next(
        iter(found.values())
    )
    cross_encoder = write_tiny_cross_encoder(tmp_path / "reranker")  # one label: rerank, no classifier
    found = issues_of(with_artifact(intents_document(), cross_encoder))
    assert "answers rerank; the domain_classifier binding reads label_probabilities" in next(
        iter(found.values())
    )


@pytest.mark.slow  # the module's tiny models: torch and transformers load (~13 s)
def test_a_pii_label_map_names_the_taggers_entity_types(intent_dirs):
    _, tagger = intent_dirs
    document = intents_document()
    document["model_deployments"]["tagger"] = {"artifact": str(tagger)}
    pii = {"deployment": "tagger", "labels": {"PER": "PERSON", "B-EMAIL": "EMAIL_ADDRESS"}}
    document["global"]["model_catalog"]["modules"] = {"classifier": {"pii": pii}}
    found = issues_of(document)  # B-/I- tags are merged into types: B-EMAIL is no label
    path = "global.model_catalog.modules.classifier.pii.labels.B-EMAIL"
    assert list(found) == [path] and "(its labels: PER, EMAIL)" in found[path]


@pytest.mark.slow  # the module's tiny models: torch and transformers load (~13 s)
def test_config_validate_reads_the_bound_directory(intent_dirs, tmp_path):
    model, _ = intent_dirs
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(with_artifact(intents_document(LABELS), model)))
    bad.write_text(yaml.safe_dump(with_artifact(intents_document({"LABEL_9": "tech"}), model)))
    assert CliRunner().invoke(cli, ["config", "validate", str(good)]).exit_code == 0
    refused = CliRunner().invoke(cli, ["config", "validate", str(bad)])
    assert refused.exit_code == EXIT_INVALID
    assert ".".join((*DOMAIN, "labels", "LABEL_9")) in refused.stderr


@pytest.mark.slow  # the module's tiny models: torch and transformers load (~13 s)
def test_serve_refuses_a_bound_directory_at_start_before_ray(intent_dirs, tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from app.cli import serve

    def no_ray(*_: object) -> None:
        raise AssertionError("Ray started for a configuration that should have been refused")

    monkeypatch.setattr(serve, "_start_ray", no_ray)
    model, tagger = intent_dirs
    missing = tmp_path / "nothing-here"
    cases = {
        "missing.yaml": (
            with_artifact(intents_document(LABELS), missing),
            [str(missing), "no such directory"],
        ),
        "tagger.yaml": (with_artifact(intents_document(), tagger), ["answers token_spans"]),
        "labels.yaml": (
            with_artifact(intents_document({"LABEL_9": "tech"}), model),
            [".".join((*DOMAIN, "labels", "LABEL_9")), "has no label 'LABEL_9'"],
        ),
    }
    for name, (document, reasons) in cases.items():
        path = tmp_path / name
        path.write_text(yaml.safe_dump(document))
        out = io.StringIO()
        code = serve.serve_forever(
            path, "127.0.0.1", 1, False, Console(file=out, width=400), with_envoy=False
        )
        text = out.getvalue()
        assert code == 2 and f"invalid configuration {path}" in text, text
        for reason in reasons:
            assert reason in text, text
