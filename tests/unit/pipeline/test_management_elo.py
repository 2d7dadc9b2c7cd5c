"""Outcomes through the management API train an `elo` decision's ratings (issue 17): the next
selection changes, on every replica and after a restart; a store that fails never fails an
outcome or a request. Runs on the file store and on Redis (tests/unit/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.models.elo import GLOBAL_SCOPE
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.elo_selector import RatingsFeed
from app.pipeline.learning.ratings import RatingStore
from app.pipeline.plan import CompletionReport
from app.pipeline.replay import REPLAY_ID_HEADER
from app.replays.replays import ReplayStore
from app.state.shared_store import ManagementStoreSettings, redis_client
from app.state.state_stores import RedisStateStore
from tests.unit.management.test_management_support import Harness, make_ratings
from tests.unit.pipeline.test_elo_selection import config_document

OUTCOMES = "/api/v1/observability/outcomes"


def document(k_factor: float = 32) -> dict[str, Any]:
    """Decision `all` over big and small by elo, recording replays (outcomes name them)."""
    replays = [{"type": "router_replay", "configuration": {}}]
    return config_document({"type": "elo", "elo": {"k_factor": k_factor}}, plugins=replays)


class Replica:
    """A Router replica's pipeline and an Ingress's management API over shared stores."""

    def __init__(self, ratings: RatingStore, replays: ReplayStore, k_factor: float = 32) -> None:
        self.feed = RatingsFeed(ratings, refresh_s=3600)  # refreshed by the test, not by time
        services = PipelineServices(record_replay=replays.record, ratings=self.feed)
        self.harness = Harness(document(k_factor), replays=replays, ratings=ratings, services=services)
        self.pipeline: RouterPipeline = self.harness.pipeline

    async def answer(self) -> tuple[str, str]:
        """Route and complete one request: (the model that answered, its replay id)."""
        body = {"model": "MoM", "messages": [{"role": "user", "content": "hello"}]}
        plan = await self.pipeline.route(body)
        assert plan.selected_model is not None
        await self.pipeline.complete(plan, CompletionReport(status=200, model=plan.selected_model))
        return plan.selected_model, plan.response_headers[REPLAY_ID_HEADER]

    async def post(self, outcome: dict[str, Any], **headers: str) -> int:
        async with self.harness.client() as client:
            response = await client.post(OUTCOMES, json=outcome, headers=headers)
        assert response.status_code in (200, 201), response.text
        return response.status_code


@pytest.mark.slow
async def test_a_bad_verdict_moves_the_next_request_to_the_other_model(tmp_path: Path) -> None:
    replica = Replica(make_ratings(tmp_path), ReplayStore())
    model, replay_id = await replica.answer()
    assert model == "big"  # equal ratings: the config's order
    await replica.post({"replay_id": replay_id, "target": "big", "verdict": "thumbs_down"})
    await replica.feed.refresh()
    assert (await replica.answer())[0] == "small"
    ratings = replica.feed.current()
    assert ratings.rating("all", "big") == pytest.approx(1484)  # 32 * (0 - 0.5) against the anchor
    assert ratings.rating(GLOBAL_SCOPE, "big") == pytest.approx(1484)
    assert ratings.rating("all", "small") is None  # a verdict on big's answer: small did not play


@pytest.mark.slow
async def test_a_preferred_target_wins_a_pairwise_game_seen_by_every_replica(tmp_path: Path) -> None:
    replays = ReplayStore()
    first = Replica(make_ratings(tmp_path), replays, k_factor=100)
    model, replay_id = await first.answer()
    await first.post({"replay_id": replay_id, "target": "small", "verdict": "preferred"})
    # Another replica (or this one after a restart) reads the same store.
    other = Replica(make_ratings(tmp_path), replays, k_factor=100)
    await other.pipeline.warm_up()
    assert (await other.answer())[0] == "small"
    ratings = other.feed.current()
    assert ratings.rating("all", "small") == pytest.approx(1550)
    assert ratings.rating("all", "big") == pytest.approx(1450)


@pytest.mark.slow
async def test_an_idempotent_replay_or_an_unknown_verdict_rates_nothing_again(tmp_path: Path) -> None:
    store = make_ratings(tmp_path)
    replica = Replica(store, ReplayStore())
    _, replay_id = await replica.answer()
    outcome = {"replay_id": replay_id, "target": "big", "verdict": "good"}
    assert await replica.post(outcome, **{"Idempotency-Key": "k1"}) == 201
    assert await replica.post(outcome, **{"Idempotency-Key": "k1"}) == 200
    await replica.post({**outcome, "verdict": "interesting"})
    assert store.load().ratings["all"]["big"].games == 1


@pytest.mark.file_store
async def test_a_ratings_store_that_is_down_fails_neither_outcomes_nor_requests() -> None:
    settings = ManagementStoreSettings(backend="redis", url="redis://127.0.0.1:9", timeout_seconds=0.5)
    down = RatingStore(RedisStateStore(redis_client(settings), "svc_sr:test:down:"))
    replica = Replica(down, ReplayStore())
    await replica.pipeline.warm_up()  # the first read fails: the initial ratings serve
    model, replay_id = await replica.answer()
    assert await replica.post({"replay_id": replay_id, "target": model, "verdict": "bad"}) == 201
    await replica.feed.refresh()
    assert (await replica.answer())[0] == "big"  # still routed, on the initial ratings
