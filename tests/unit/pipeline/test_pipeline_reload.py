"""A Router replica's hot reload without Ray (app/pipeline/reload.py): the first configuration
must load; a later one that fails leaves the previous generation serving and says why."""

from __future__ import annotations

from typing import Any

import pytest

from app.config.errors import ConfigError
from app.pipeline.reload import ReloadingPipeline
from app.pipeline.services import PipelineServices
from app.srun.hosting import BindingRuntimes
from tests.unit.replays.test_replay_recording import body, config


def document(model: str = "small") -> dict[str, Any]:
    doc = config(None).to_document()
    doc["routing"]["decisions"][0]["modelRefs"] = [{"model": model}]
    if model != "small":
        doc["providers"]["models"].append({"name": model, "backend_refs": [{"endpoint": "127.0.0.1:8001"}]})
    return doc


def host() -> ReloadingPipeline:
    return ReloadingPipeline(PipelineServices(), BindingRuntimes())


async def selected(reloading: ReloadingPipeline) -> str | None:
    return (await reloading.pipeline.route(body("urgent: which model"), {}, "r")).selected_model


async def test_the_first_configuration_serves_and_names_its_hash() -> None:
    reloading = host()
    with pytest.raises(RuntimeError):
        _ = reloading.pipeline  # nothing before the first configuration
    await reloading.apply(document())
    state = reloading.generation()
    assert state["hash"] and state["error"] is None and state["failed_hash"] is None
    assert await selected(reloading) == "small"


async def test_a_new_configuration_is_swapped_in() -> None:
    reloading = host()
    await reloading.apply(document())
    first = reloading.generation()["hash"]
    await reloading.apply(document("large"))
    assert reloading.generation()["hash"] != first
    assert await selected(reloading) == "large"


async def test_a_broken_startup_configuration_fails_the_replica() -> None:
    with pytest.raises(ConfigError):
        await host().apply({"routing": {"decisions": "not a list"}})


async def test_an_unreadable_reload_keeps_the_previous_generation() -> None:
    reloading = host()
    await reloading.apply(document())
    serving = reloading.generation()["hash"]
    await reloading.apply({"routing": {"decisions": "not a list"}})
    state = reloading.generation()
    assert state["hash"] == serving and state["failed_hash"] is None and "ConfigError" in state["error"]
    assert await selected(reloading) == "small"


async def test_a_reload_that_fails_to_build_is_reported_with_its_hash() -> None:
    reloading = host()
    await reloading.apply(document())
    serving = reloading.generation()["hash"]

    async def refuse(config: Any) -> None:
        raise RuntimeError("warm-up failed")

    reloading.pipeline.update_config = refuse  # type: ignore[method-assign]  # the build step fails
    await reloading.apply(document("large"))
    state = reloading.generation()
    assert state["hash"] == serving and state["failed_hash"] not in (None, serving)
    assert state["error"] == "RuntimeError: warm-up failed"
    assert await selected(reloading) == "small"
