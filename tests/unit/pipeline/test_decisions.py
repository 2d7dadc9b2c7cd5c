"""Decision engine: rule trees, on_error, catch-all, strategies and tiers (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config.routing import Condition, Decision
from app.pipeline.decisions import (
    DecisionTable,
    evaluate_rule,
    index_matches,
    match_decisions,
    rank,
    referenced_signals,
    select_decision,
)
from app.pipeline.plan import SignalMatch


def leaf(type_: str, name: str, **extra) -> dict:
    return {"type": type_, "name": name, **extra}


def tree(operator: str, *conditions) -> dict:
    return {"operator": operator, "conditions": list(conditions)}


def cond(data: dict) -> Condition:
    return Condition.model_validate(data)


def signals(*matches: tuple) -> dict:
    """(type, name, matched, confidence[, error]) tuples -> the engine's signal index."""
    out = []
    for item in matches:
        type_, name, matched, confidence, *error = item
        out.append(
            SignalMatch(
                type=type_,
                name=name,
                matched=matched,
                confidence=confidence,
                error=error[0] if error else None,
            )
        )
    return index_matches(out)


def decision(name: str, rules: dict | None = None, priority: int = 0, tier: int = 0) -> Decision:
    data: dict = {"name": name, "priority": priority, "tier": tier, "modelRefs": [{"model": "m"}]}
    if rules is not None:
        data["rules"] = rules
    return Decision.model_validate(data)


SIGS = signals(
    ("keyword", "urgent", True, 0.625),
    ("keyword", "calm", False, 0.0),
    ("embedding", "code", True, 0.8),
    ("embedding", "cooking", False, 0.3),
    ("context", "long", True, 1.0),
)


def test_leaf_uses_signal_confidence():
    result = evaluate_rule(cond(leaf("keyword", "urgent")), SIGS)
    assert result.matched and result.confidence == pytest.approx(0.625)
    assert not evaluate_rule(cond(leaf("keyword", "calm")), SIGS).matched


def test_and_is_all_with_mean_confidence():
    result = evaluate_rule(cond(tree("AND", leaf("keyword", "urgent"), leaf("embedding", "code"))), SIGS)
    assert result.matched
    assert result.confidence == pytest.approx((0.625 + 0.8) / 2)
    assert not evaluate_rule(
        cond(tree("AND", leaf("keyword", "urgent"), leaf("keyword", "calm"))), SIGS
    ).matched


def test_or_is_any_with_max_of_matching_confidences():
    result = evaluate_rule(
        cond(tree("OR", leaf("keyword", "urgent"), leaf("embedding", "cooking"), leaf("embedding", "code"))),
        SIGS,
    )
    assert result.matched and result.confidence == pytest.approx(0.8)
    assert not evaluate_rule(
        cond(tree("OR", leaf("keyword", "calm"), leaf("embedding", "cooking"))), SIGS
    ).matched


def test_not_negates_its_child():
    negated_miss = evaluate_rule(cond(tree("NOT", leaf("embedding", "cooking"))), SIGS)
    assert negated_miss.matched and negated_miss.confidence == pytest.approx(0.7)
    assert not evaluate_rule(cond(tree("NOT", leaf("keyword", "urgent"))), SIGS).matched


def test_nested_tree():
    rules = tree(
        "AND",
        tree("OR", leaf("keyword", "calm"), leaf("keyword", "urgent")),
        tree("NOT", leaf("embedding", "cooking")),
        leaf("context", "long"),
    )
    result = evaluate_rule(cond(rules), SIGS)
    assert result.matched
    assert result.confidence == pytest.approx((0.625 + 0.7 + 1.0) / 3)


def test_lowercase_operators_are_accepted():
    assert evaluate_rule(cond(tree("or", leaf("keyword", "urgent"))), SIGS).matched


def test_missing_rules_is_a_catch_all():
    result = evaluate_rule(None, SIGS)
    assert result.matched and result.confidence == 1.0


@pytest.mark.parametrize(("on_error", "expected"), [(None, False), ("no_match", False), ("match", True)])
def test_errored_signal_follows_on_error(on_error, expected):
    sigs = signals(("domain", "math", True, 0.9, "classifier unavailable"))
    extra = {"on_error": on_error} if on_error else {}
    assert evaluate_rule(cond(leaf("domain", "math", **extra)), sigs).matched is expected
    # a signal that was never evaluated counts as an error too
    assert evaluate_rule(cond(leaf("pii", "email", **extra)), sigs).matched is expected


def test_not_of_errored_no_match_leaf_matches():
    sigs = signals(("jailbreak", "jb", False, 0.0, "down"))
    assert evaluate_rule(cond(tree("NOT", leaf("jailbreak", "jb"))), sigs).matched


def test_match_decisions_collects_every_match():
    decisions = [
        decision("a", leaf("keyword", "urgent")),
        decision("b", leaf("keyword", "calm")),
        decision("catch_all"),
    ]
    assert [m.name for m in match_decisions(decisions, SIGS)] == ["a", "catch_all"]


def test_priority_strategy_orders_by_priority_then_confidence_then_name():
    decisions = [
        decision("low_prio_high_conf", leaf("embedding", "code"), priority=1),
        decision("high_prio", leaf("keyword", "urgent"), priority=10),
        decision("zeta", leaf("context", "long"), priority=5),
        decision("alpha", leaf("context", "long"), priority=5),
        decision("beta_low_conf", leaf("keyword", "urgent"), priority=5),
    ]
    winner, ranked = select_decision(decisions, SIGS, "priority")
    assert winner is not None and winner.name == "high_prio"
    assert [m.name for m in ranked] == ["high_prio", "alpha", "zeta", "beta_low_conf", "low_prio_high_conf"]


def test_confidence_strategy_orders_by_confidence_then_priority_then_name():
    decisions = [
        decision("high_prio", leaf("keyword", "urgent"), priority=10),
        decision("sure_low", leaf("context", "long"), priority=1),
        decision("sure_high", leaf("context", "long"), priority=2),
        decision("code", leaf("embedding", "code"), priority=50),
    ]
    _, ranked = select_decision(decisions, SIGS, "confidence")
    assert [m.name for m in ranked] == ["sure_high", "sure_low", "code", "high_prio"]


def test_tiers_win_first_then_confidence_and_untiered_come_last():
    decisions = [
        decision("untiered_top_priority", leaf("context", "long"), priority=1000),
        decision("tier2", leaf("context", "long"), priority=100, tier=2),
        decision("tier1_low_conf", leaf("keyword", "urgent"), priority=1, tier=1),
        decision("tier1_high_conf", leaf("embedding", "code"), priority=0, tier=1),
    ]
    winner, ranked = select_decision(decisions, SIGS, "priority")
    assert winner is not None and winner.name == "tier1_high_conf"
    assert [m.name for m in ranked] == ["tier1_high_conf", "tier1_low_conf", "tier2", "untiered_top_priority"]


def test_tier_applies_even_when_the_tiered_decision_does_not_match():
    # any configured tier switches the ordering to tier-first (confidence before priority)
    decisions = [
        decision("prio", leaf("keyword", "urgent"), priority=10),
        decision("conf", leaf("context", "long"), priority=1),
        decision("tiered_miss", leaf("keyword", "calm"), tier=1),
    ]
    winner, _ = select_decision(decisions, SIGS, "priority")
    assert winner is not None and winner.name == "conf"


def test_no_match_returns_none():
    winner, ranked = select_decision([decision("a", leaf("keyword", "calm"))], SIGS)
    assert winner is None and ranked == []


def test_referenced_signals_walks_every_tree():
    decisions = [
        decision("a", tree("AND", leaf("keyword", "k1"), tree("NOT", leaf("embedding", "e1")))),
        decision("b", tree("OR", leaf("keyword", "k2"), leaf("keyword", "k1"))),
        decision("c"),
    ]
    assert referenced_signals(decisions) == {
        "keyword": frozenset({"k1", "k2"}),
        "embedding": frozenset({"e1"}),
    }


def test_rank_is_stable_for_equal_keys_by_name():
    decisions = [decision(n, leaf("context", "long")) for n in ("c", "a", "b")]
    assert [m.name for m in rank(match_decisions(decisions, SIGS))] == ["a", "b", "c"]


# ------------------------------------------------------------------ properties

leaf_values = st.tuples(st.booleans(), st.floats(min_value=0, max_value=1))


@given(st.lists(leaf_values, min_size=1, max_size=6))
def test_and_or_agree_with_all_any(values):
    sigs = signals(*[("keyword", f"k{i}", m, c) for i, (m, c) in enumerate(values)])
    leaves = [leaf("keyword", f"k{i}") for i in range(len(values))]
    both = evaluate_rule(cond(tree("AND", *leaves)), sigs)
    either = evaluate_rule(cond(tree("OR", *leaves)), sigs)
    assert both.matched == all(m for m, _ in values)
    assert either.matched == any(m for m, _ in values)
    if either.matched:
        assert either.confidence == pytest.approx(max(c for m, c in values if m))
    if both.matched:
        assert both.confidence == pytest.approx(sum(c for _, c in values) / len(values))


@given(leaf_values)
def test_double_negation_restores_the_match(value):
    sigs = signals(("keyword", "k", *value))
    plain = evaluate_rule(cond(leaf("keyword", "k")), sigs)
    twice = evaluate_rule(cond(tree("NOT", tree("NOT", leaf("keyword", "k")))), sigs)
    assert twice.matched == plain.matched
    assert twice.confidence == pytest.approx(plain.confidence)


# ------------------------------------------------------------ the compiled table (route()'s path)


def spec_eval(node: dict | None, values: dict[str, tuple[bool, float]]) -> tuple[bool, float]:
    """The module docstring's semantics, written out independently of the engine."""
    if node is None:
        return True, 1.0
    if "type" in node:
        if node["name"] not in values:  # not evaluated: on_error, default no_match
            return (True, 1.0) if node.get("on_error") == "match" else (False, 0.0)
        return values[node["name"]]
    results = [spec_eval(child, values) for child in node["conditions"]]
    if node["operator"] == "AND":
        ok = all(m for m, _ in results)
        return (True, sum(c for _, c in results) / len(results)) if ok else (False, 0.0)
    if node["operator"] == "OR":
        hits = [c for m, c in results if m]
        return (True, max(hits)) if hits else (False, 0.0)
    matched, confidence = results[0]
    return (not matched), 1.0 - confidence


names = st.sampled_from([f"k{i}" for i in range(6)])
leaf_nodes = st.builds(
    lambda n, err: leaf("keyword", n, **({"on_error": "match"} if err else {})), names, st.booleans()
)
rule_trees = st.recursive(
    leaf_nodes,
    lambda children: st.one_of(
        st.builds(lambda cs: tree("AND", *cs), st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda cs: tree("OR", *cs), st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda c: tree("NOT", c), children),
    ),
    max_leaves=8,
)


@given(
    st.lists(st.tuples(st.one_of(st.none(), rule_trees), st.integers(0, 5)), min_size=1, max_size=8),
    st.dictionaries(names, leaf_values, max_size=6),
    st.sampled_from(["priority", "confidence"]),
)
def test_the_compiled_table_selects_what_the_semantics_say(rules, values, strategy):
    decisions = [decision(f"d{i}", rule, priority) for i, (rule, priority) in enumerate(rules)]
    sigs = signals(*[("keyword", name, m, c) for name, (m, c) in values.items()])
    expected = []
    for d, (rule, _) in zip(decisions, rules, strict=True):
        matched, confidence = spec_eval(rule, values)
        if matched:
            expected.append((d.name, confidence))
    winner, ranked = DecisionTable(decisions, strategy).select(sigs)
    assert sorted(m.name for m in ranked) == sorted(name for name, _ in expected)
    by_name = dict(expected)
    for match in ranked:
        assert match.confidence == pytest.approx(by_name[match.name])
    if expected:
        assert winner is ranked[0]
        best = rank([m for m in ranked], strategy)[0]
        assert winner.name == best.name
    else:
        assert winner is None
