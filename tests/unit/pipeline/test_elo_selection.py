"""`algorithm.type: elo`: the config block, the rating math, the stored ratings, selection by
rating and cost, and what a store that fails leaves (on small fixtures)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.config.document import RouterConfig
from app.config.errors import ConfigError
from app.config.loader import parse_config
from app.config.selection import Algorithm
from app.config.validate import semantic_issues
from app.models.elo import (
    GLOBAL_SCOPE,
    Game,
    RatingsDocument,
    apply_games,
    expected,
    initial_ratings_from,
    load_initial_ratings,
    packaged_initial_ratings,
    quality,
    rating_for,
    save_initial_ratings,
)
from app.models.selection import SelectionArtifactError
from app.pipeline import PipelineServices, RouterPipeline
from app.pipeline.elo_selector import RatingsFeed
from app.pipeline.learning.elo_feedback import outcome_games
from app.pipeline.learning.ratings import RATINGS_FILE, RATINGS_LOCK, RatingStore
from app.replays.replays import OutcomeIn, outcome_score
from app.state.state_stores import FileStateStore


# -- the config block ---------------------------------------------------------------------------
def test_type_elo_takes_the_reference_fields() -> None:
    algorithm = Algorithm.model_validate(
        {
            "type": "elo",
            "elo": {
                "initial_rating": 1200,
                "k_factor": 16,
                "category_weighted": False,
                "decay_factor": 0.1,
                "min_comparisons": 10,
                "cost_scaling_factor": 0.5,
                "storage_path": "/var/lib/vsr/elo.json",
                "auto_save_interval": "30s",
            },
        }
    )
    assert algorithm.elo is not None
    assert (algorithm.elo.initial_rating, algorithm.elo.k_factor) == (1200, 16)
    assert Algorithm.model_validate({"type": "elo"}).elo is None  # the defaults apply


@pytest.mark.parametrize(
    ("elo", "path"),
    [
        ({"k_factor": -1}, "routing.decisions[0].algorithm.elo.k_factor"),
        ({"k_factr": 16}, "routing.decisions[0].algorithm.elo.k_factr"),
        ({"initial_rating": "high"}, "routing.decisions[0].algorithm.elo.initial_rating"),
        ({"decay_factor": 2}, "routing.decisions[0].algorithm.elo.decay_factor"),
    ],
)
def test_a_bad_elo_field_is_refused_with_its_path(elo: dict[str, Any], path: str) -> None:
    document = config_document({"type": "elo", "elo": elo})
    with pytest.raises(ConfigError) as refused:
        parse_config(document)
    assert path in str(refused.value)


def test_an_elo_decision_without_replays_is_warned_that_it_cannot_learn() -> None:
    _, warnings = semantic_issues(config_of({"type": "elo"}))
    assert any("routing.decisions[0].algorithm" in w and "never change" in w for w in warnings)
    replayed = config_document({"type": "elo"}, plugins=[{"type": "router_replay", "configuration": {}}])
    _, warnings = semantic_issues(RouterConfig.model_validate(replayed))
    assert not any("never change" in w for w in warnings)


# -- the math -----------------------------------------------------------------------------------
def test_a_win_raises_the_winner_by_k_times_the_surprise() -> None:
    game = Game("d", "big", 1.0, 32, 1500, "small", 1500)
    after = apply_games(RatingsDocument(), [game])
    assert after.rating("d", "big") == pytest.approx(1516)  # 32 * (1 - 0.5)
    assert after.rating("d", "small") == pytest.approx(1484)  # zero-sum
    assert after.revision == 1 and after.ratings["d"]["big"].wins == 1
    assert after.ratings["d"]["small"].losses == 1
    halved = apply_games(RatingsDocument(), [Game("d", "big", 1.0, 16, 1500, "small", 1500)])
    assert halved.rating("d", "big") == pytest.approx(1508)  # the K-factor scales the step


def test_an_expected_win_moves_less_than_an_upset() -> None:
    favourite = apply_games(RatingsDocument(), [Game("d", "big", 1.0, 32, 1700, "small", 1500)])
    upset = apply_games(RatingsDocument(), [Game("d", "small", 1.0, 32, 1500, "big", 1700)])
    gain = favourite.rating("d", "big") - 1700
    assert gain == pytest.approx(32 * (1 - expected(1700, 1500)))
    assert upset.rating("d", "small") - 1500 > gain


def test_a_game_against_the_anchor_moves_only_the_player() -> None:
    after = apply_games(RatingsDocument(), [Game("d", "small", 0.0, 32, 1500, None, 1500)])
    assert after.rating("d", "small") == pytest.approx(1484)
    assert set(after.ratings["d"]) == {"small"}


def test_a_rating_reads_as_the_chance_of_a_good_answer() -> None:
    assert quality(1500, 1500) == 0.5
    assert quality(rating_for(0.7, 1500), 1500) == pytest.approx(0.7)
    assert rating_for(1.0, 1500) < 1500 + 1000  # clipped: never infinite


def test_repeated_verdicts_settle_at_the_models_share_of_good_answers() -> None:
    document = RatingsDocument()
    for i in range(4000):
        score = 1.0 if i % 10 < 7 else 0.0  # good 70 % of the time
        document = apply_games(document, [Game("d", "m", score, 8, 1500, None, 1500)])
    assert quality(document.rating("d", "m") or 0, 1500) == pytest.approx(0.7, abs=0.05)


# -- outcomes to games --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("verdict", "score", "result"),
    [
        ("good", None, 1.0),
        ("Thumbs-Up", None, 1.0),
        ("wrong", None, 0.0),
        ("rejected", None, 0.0),
        ("tie", None, 0.5),
        ("bad", 0.8, 0.8),  # a score in [0, 1] says more than the word
        ("meh", None, None),
        ("meh", 7.0, None),  # outside [0, 1]: not a result
        ("good", -1.0, 1.0),
    ],
)
def test_an_outcome_says_a_result_by_score_or_verdict(
    verdict: str, score: float | None, result: float | None
) -> None:
    assert outcome_score(verdict, score) == result


def outcome(target: str, verdict: str = "good", score: float | None = None) -> OutcomeIn:
    return OutcomeIn(replay_id="r1", target=target, verdict=verdict, score=score)


def test_a_target_naming_another_model_of_the_decision_is_a_pairwise_game() -> None:
    config = config_of({"type": "elo", "elo": {"k_factor": 10}})
    record = {"decision": "all", "selected_model": "small"}
    games = outcome_games(config, record, outcome("big", "preferred"))
    assert [(g.scope, g.player, g.opponent, g.score, g.k) for g in games] == [
        ("all", "big", "small", 1.0, 10),
        (GLOBAL_SCOPE, "big", "small", 1.0, 10),
    ]


def test_a_verdict_on_the_answer_plays_the_answering_model_against_the_anchor() -> None:
    config = config_of({"type": "elo", "elo": {"category_weighted": False, "initial_rating": 1000}})
    record = {"decision": "all", "selected_model": "big", "served_model": "small"}  # a fallback served
    for target in ("small", "the answer", "big-ish"):
        games = outcome_games(config, record, outcome(target, "wrong"))
        assert [(g.scope, g.player, g.opponent, g.score, g.opponent_rating) for g in games] == [
            (GLOBAL_SCOPE, "small", None, 0.0, 1000)
        ]


def test_outcomes_of_other_decisions_or_without_a_result_rate_nothing() -> None:
    knn_free = config_of({"type": "static"})
    assert outcome_games(knn_free, {"decision": "all", "selected_model": "big"}, outcome("big")) == []
    elo = config_of({"type": "elo"})
    assert outcome_games(elo, {"decision": "gone", "selected_model": "big"}, outcome("big")) == []
    assert outcome_games(elo, {"decision": "all", "selected_model": "big"}, outcome("big", "meh")) == []
    assert outcome_games(elo, {"decision": "all", "selected_model": "other"}, outcome("big")) == []


# -- the stored ratings -------------------------------------------------------------------------
def test_the_file_store_counts_every_update_of_concurrent_writers(tmp_path: Path) -> None:
    """Two replicas' stores on one state directory: a compare-and-set under the file lock."""
    stores = [RatingStore(FileStateStore(tmp_path, RATINGS_FILE, RATINGS_LOCK)) for _ in range(2)]
    game = Game("d", "m", 1.0, 1, 1500, None, 1e9)  # against a far better anchor: +1 each time

    def play(store: RatingStore) -> None:
        for _ in range(10):
            store.apply([game])

    threads = [threading.Thread(target=play, args=(s,)) for s in stores * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    document = stores[1].load()
    assert document.revision == 40 and document.ratings["d"]["m"].games == 40
    assert document.rating("d", "m") == pytest.approx(1540)
    assert (tmp_path / RATINGS_FILE).exists() and not (tmp_path / "state.json").exists()


# -- selection ----------------------------------------------------------------------------------
def config_document(algorithm: dict[str, Any], plugins: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    priced = lambda name, p: {  # noqa: E731
        "name": name,
        "pricing": {"prompt_per_1m": p, "completion_per_1m": p},
        "backend_refs": [{"endpoint": "127.0.0.1:9"}],
    }
    decision: dict[str, Any] = {
        "name": "all",
        "modelRefs": [{"model": "big"}, {"model": "small"}],
        "algorithm": algorithm,
    }
    if plugins:
        decision["plugins"] = plugins
    return {
        "version": "v0.3",
        "providers": {
            "defaults": {"default_model": "small"},
            "models": [priced("big", 10.0), priced("small", 1.0)],
        },
        "routing": {"decisions": [decision]},
    }


def config_of(algorithm: dict[str, Any]) -> RouterConfig:
    return RouterConfig.model_validate(config_document(algorithm))


def body(text: str = "hello") -> dict[str, Any]:
    return {"model": "MoM", "messages": [{"role": "user", "content": text}]}


def stored(ratings: dict[str, float], scope: str = "all") -> RatingStore:
    store = RatingStore()
    games = [Game(scope, m, 0.5, 0, r, None, 1500) for m, r in ratings.items()]  # k 0: set, not moved
    store.apply(games)
    return store


async def selected(algorithm: dict[str, Any], feed: RatingsFeed | None) -> list[str]:
    pipeline = RouterPipeline(config_of(algorithm), PipelineServices(ratings=feed))
    if feed is not None:
        await feed.refresh()
    plan = await pipeline.route(body())
    return [t.model for t in plan.candidates]


async def test_selection_follows_the_ratings() -> None:
    feed = RatingsFeed(stored({"big": 1400, "small": 1600}), refresh_s=3600)
    assert await selected({"type": "elo"}, feed) == ["small", "big"]
    feed = RatingsFeed(stored({"big": 1600, "small": 1400}), refresh_s=3600)
    assert await selected({"type": "elo"}, feed) == ["big", "small"]


async def test_equal_ratings_keep_the_config_order_and_cost_breaks_the_tie() -> None:
    assert await selected({"type": "elo"}, None) == ["big", "small"]
    assert await selected({"type": "elo", "cost_quality_tradeoff": 0.1}, None) == ["small", "big"]


async def test_the_cost_tradeoff_buys_the_cheaper_model_when_the_rating_gap_is_small() -> None:
    feed = RatingsFeed(stored({"big": 1560, "small": 1500}), refresh_s=3600)
    assert await selected({"type": "elo", "cost_quality_tradeoff": 0.0}, feed) == ["big", "small"]
    # quality 0.585 vs 0.5; cost 1 vs 0.1 of the dearest: (1 - t) * 0.085 < t * 0.9 at t = 0.2
    assert await selected({"type": "elo", "cost_quality_tradeoff": 0.2}, feed) == ["small", "big"]
    wide = RatingsFeed(stored({"big": 1900, "small": 1100}), refresh_s=3600)
    assert await selected({"type": "elo", "cost_quality_tradeoff": 0.2}, wide) == ["big", "small"]


async def test_a_decision_reads_its_own_scope_or_the_global_one() -> None:
    feed = RatingsFeed(stored({"big": 1400, "small": 1600}, scope=GLOBAL_SCOPE), refresh_s=3600)
    assert await selected({"type": "elo"}, feed) == ["big", "small"]  # its own scope: no ratings yet
    shared = {"type": "elo", "elo": {"category_weighted": False}}
    assert await selected(shared, feed) == ["small", "big"]


class FlakySource:
    """A store that can go down."""

    def __init__(self, store: RatingStore) -> None:
        self.store = store
        self.down = False

    def revision(self) -> int:
        if self.down:
            raise ConnectionError("store down")
        return self.store.revision()

    def load(self) -> RatingsDocument:
        if self.down:
            raise ConnectionError("store down")
        return self.store.load()


async def test_a_store_that_goes_down_leaves_the_last_ratings_read() -> None:
    source = FlakySource(stored({"big": 1400, "small": 1600}))
    feed = RatingsFeed(source, refresh_s=3600)
    pipeline = RouterPipeline(config_of({"type": "elo"}), PipelineServices(ratings=feed))
    await feed.refresh()
    source.down = True
    source.store.apply([Game("all", "big", 1.0, 1000, 1400, None, 1500)])  # unseen: the store is down
    await feed.refresh()
    plan = await pipeline.route(body())
    assert plan.selected_model == "small"  # routed, on the last ratings read


async def test_a_store_down_from_the_start_leaves_the_initial_ratings() -> None:
    source = FlakySource(RatingStore())
    source.down = True
    feed = RatingsFeed(source, refresh_s=0)
    pipeline = RouterPipeline(config_of({"type": "elo"}), PipelineServices(ratings=feed))
    await pipeline.warm_up()
    plan = await pipeline.route(body())  # starts a background refresh, never waits for it
    await feed.drain()
    assert plan.selected_model == "big"


async def test_the_feed_refreshes_in_the_background_once_its_ratings_are_stale() -> None:
    now = [0.0]
    store = stored({"big": 1600, "small": 1400})
    feed = RatingsFeed(store, refresh_s=5, clock=lambda: now[0])
    pipeline = RouterPipeline(config_of({"type": "elo"}), PipelineServices(ratings=feed))
    await pipeline.warm_up()  # reads the stored ratings before the first request
    assert (await pipeline.route(body())).selected_model == "big"
    store.apply([Game("all", "big", 0.0, 400, 1600, None, 1500)])  # big: 1600 -> 1344
    assert (await pipeline.route(body())).selected_model == "big"  # not stale yet: no read
    now[0] = 6.0
    assert (await pipeline.route(body())).selected_model == "big"  # this one starts the read
    await feed.drain()
    assert (await pipeline.route(body())).selected_model == "small"


# -- starting ratings ---------------------------------------------------------------------------
def test_initial_ratings_come_from_recorded_answers_per_category(tmp_path: Path) -> None:
    outcomes = {"big": [True, True, True, False], "small": [True, False, False, True]}
    ratings = initial_ratings_from(outcomes, ["math", "math", "law", "law"], {"big": 300, "small": 100})
    # overall: big (3 + 1) / (4 + 2), small (2 + 1) / (4 + 2); math: big 3/4, small 2/4
    assert quality(ratings.overall["big"], 1500) == pytest.approx(4 / 6, abs=1e-3)
    assert quality(ratings.categories["math"]["small"], 1500) == pytest.approx(0.5, abs=1e-3)
    path = tmp_path / "elo.json"
    save_initial_ratings(path, ratings)
    assert load_initial_ratings(path) == ratings


async def test_a_decision_named_after_a_category_starts_from_its_table(tmp_path: Path) -> None:
    outcomes = {"big": [True, False, False, False], "small": [False, True, True, True]}
    save_initial_ratings(
        tmp_path / "elo.json",
        initial_ratings_from(outcomes, ["all", "x", "x", "x"], {"big": 300, "small": 100}),
    )
    algorithm = {"type": "elo", "elo": {"initial_ratings_path": str(tmp_path / "elo.json")}}
    assert await selected(algorithm, None) == ["big", "small"]  # decision `all`: big 2/3, small 1/3
    shared = {**algorithm, "elo": {**algorithm["elo"], "category_weighted": False}}
    assert await selected(shared, None) == ["small", "big"]  # overall: small 4/6, big 2/6


def test_a_missing_initial_ratings_file_is_refused_when_compiled(tmp_path: Path) -> None:
    algorithm = {"type": "elo", "elo": {"initial_ratings_path": str(tmp_path / "absent.json")}}
    with pytest.raises(SelectionArtifactError, match="not found"):
        RouterPipeline(config_of(algorithm), PipelineServices())


def test_the_packaged_initial_ratings_know_the_ten_recorded_models() -> None:
    ratings = load_initial_ratings(packaged_initial_ratings())
    assert len(ratings.overall) == 10 and len(ratings.categories) == 14
    best = max(ratings.overall, key=lambda m: ratings.overall[m])
    assert best == "gemini-1.5-pro-002"
    assert set(ratings.mean_completion_tokens) == set(ratings.overall)
