"""Where a router stands against what needs no router: the cost-quality frontier of fixed mixes
of models, the per-question oracle, APGR and the margin over the frontier at fixed budgets.

- A **random mix** of two models sends each question to the dearer one with probability w: its
  accuracy and cost are the straight line between the two models' points (expected values; no
  draw). The best mix of two models at a budget is the **hull**: the upper concave envelope of
  the single models' points, from the cheapest model to the most accurate one (a point on the
  envelope is a mix of the two vertices around it; spending more than the most accurate model
  buys nothing, so the hull stays flat after it).
- The router's **curve** is its points over its knob (one run per knob value, cost ascending).
  Between two points, a random mix of the two settings; below its cheapest point, a mix of the
  weak model and that point (where RouteLLM's curves start); above its dearest point, flat.
  Never an envelope chosen with hindsight: every knob value swept counts, in cost order.
- **APGR** (RouteLLM's average performance gap recovered): the mean over costs c between the
  weak and the strong model of (router(c) - weak) / (strong - weak). The straight line between
  the two scores 0.5; a router at the strong model's accuracy everywhere scores 1. The strong
  model is the most accurate single model, the weak one the hull vertex before it (flash and
  pro on MMLU-Pro's recorded answers), unless the caller names them.
- **Margin** at a budget: router(c) - hull(c), in accuracy (0.03 is +3 points).

Costs are per 1,000 queries (the report's unit), so runs over different question sets compare.
Everything here is arithmetic on `Point`s: tests check it on hand-computed numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from app.benchmark.baselines import Point

# Budgets the report gives the margin at: the weak model's cost, then these shares of the strong's.
BUDGET_SHARES = (0.15, 0.25, 0.35, 0.5, 0.75, 1.0)


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CurvePoint(_Shape):
    """The router at one knob value (e.g. `budget_per_1k=0.1`)."""

    knob: str
    point: Point


class PairMix(_Shape):
    """The random mix of two models: the line from the cheaper's point to the dearer's."""

    cheap: str
    dear: str
    cheap_accuracy: float
    cheap_cost_per_1k: float
    dear_accuracy: float
    dear_cost_per_1k: float


class BudgetMargin(_Shape):
    cost_per_1k: float
    share_of_strong: float  # the budget as a share of the strong model's cost
    router: float  # the router's accuracy at this budget (its curve, interpolated)
    hull: float  # the best random mix of two models at this budget
    margin: float  # router - hull


class Frontier(_Shape):
    questions: int
    hull: list[Point]  # the envelope's vertices, cost ascending
    pairs: list[PairMix]
    weak: str | None
    strong: str | None
    curve: list[CurvePoint]  # cost ascending
    apgr: float | None  # None: no curve, or weak == strong
    margins: list[BudgetMargin]


def upper_hull(points: Sequence[Point]) -> list[Point]:
    """The vertices of the upper concave envelope from the cheapest point to the most accurate
    (ties in cost: the more accurate; points dearer than the most accurate one are left out)."""
    ordered = sorted(points, key=lambda p: (p.cost_per_1k, -p.accuracy, p.name))
    if not ordered:
        return []
    best = max(ordered, key=lambda p: (p.accuracy, -p.cost_per_1k))
    hull: list[Point] = []
    for p in ordered:
        if p.cost_per_1k > best.cost_per_1k:
            break
        if hull and p.cost_per_1k == hull[-1].cost_per_1k:
            continue  # the same cost, no more accurate (sorted that way)
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()  # hull[-1] lies on or under the line from hull[-2] to p
        hull.append(p)
    while len(hull) >= 2 and hull[-2].accuracy >= hull[-1].accuracy:
        hull.pop()  # unreachable when `best` ends it; kept for ties of accuracy
    return hull


def _cross(a: Point, b: Point, c: Point) -> float:
    """> 0 when b lies under the line a-c (a left turn): then b is not on the upper hull."""
    return (b.cost_per_1k - a.cost_per_1k) * (c.accuracy - a.accuracy) - (b.accuracy - a.accuracy) * (
        c.cost_per_1k - a.cost_per_1k
    )


def _interpolate(knots: Sequence[tuple[float, float]], cost: float) -> float:
    """Piecewise-linear through (cost, accuracy) knots sorted by cost; flat after the last."""
    if cost >= knots[-1][0]:
        return knots[-1][1]
    for (c0, a0), (c1, a1) in zip(knots, knots[1:], strict=False):
        if c0 <= cost <= c1:
            return a0 if c1 == c0 else a0 + (a1 - a0) * (cost - c0) / (c1 - c0)
    raise ValueError("cost below the first knot")


def hull_accuracy(hull: Sequence[Point], cost_per_1k: float) -> float | None:
    """The best random mix of two models at this budget (None: below the cheapest model)."""
    if not hull or cost_per_1k < hull[0].cost_per_1k:
        return None
    return _interpolate([(p.cost_per_1k, p.accuracy) for p in hull], cost_per_1k)


def curve_knots(curve: Sequence[Point], weak: Point | None) -> list[tuple[float, float]]:
    """The router's curve as knots: its points in cost order, the weak model's first when it
    is cheaper than every one of them."""
    knots = [(p.cost_per_1k, p.accuracy) for p in sorted(curve, key=lambda p: (p.cost_per_1k, p.name))]
    if weak is not None and knots and weak.cost_per_1k < knots[0][0]:
        knots.insert(0, (weak.cost_per_1k, weak.accuracy))
    return knots


def curve_accuracy(knots: Sequence[tuple[float, float]], cost_per_1k: float) -> float | None:
    if not knots or cost_per_1k < knots[0][0]:
        return None
    return _interpolate(knots, cost_per_1k)


def apgr(knots: Sequence[tuple[float, float]], weak: Point, strong: Point) -> float | None:
    """The mean of (router(c) - weak) / (strong - weak) over c from the weak model's cost to the
    strong model's: exact (the trapezoid rule on a piecewise-linear curve, at its knots)."""
    lo, hi = weak.cost_per_1k, strong.cost_per_1k
    gap = strong.accuracy - weak.accuracy
    if not knots or hi <= lo or gap <= 0 or knots[0][0] > lo:
        return None
    xs = sorted({lo, hi, *(c for c, _ in knots if lo < c < hi)})
    ys = [(curve_accuracy(knots, x) or 0.0) for x in xs]
    area = sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False))
    return (area / (hi - lo) - weak.accuracy) / gap


def weak_and_strong(
    singles: Sequence[Point], hull: Sequence[Point], weak: str | None = None, strong: str | None = None
) -> tuple[Point | None, Point | None]:
    """The named models, else: strong = the most accurate, weak = the hull vertex before it."""
    by_name = {p.name: p for p in singles}
    for name in (weak, strong):
        if name is not None and name not in by_name:
            raise ValueError(f"{name!r} is not one of the run's models ({', '.join(sorted(by_name))})")
    top = by_name[strong] if strong is not None else (hull[-1] if hull else None)
    if weak is not None:
        return by_name[weak], top
    before = [p for p in hull if top is not None and p.cost_per_1k < top.cost_per_1k]
    return (before[-1] if before else top), top


def pair_mixes(singles: Sequence[Point]) -> list[PairMix]:
    ordered = sorted(singles, key=lambda p: (p.cost_per_1k, p.name))
    return [
        PairMix(
            cheap=a.name,
            dear=b.name,
            cheap_accuracy=a.accuracy,
            cheap_cost_per_1k=a.cost_per_1k,
            dear_accuracy=b.accuracy,
            dear_cost_per_1k=b.cost_per_1k,
        )
        for i, a in enumerate(ordered)
        for b in ordered[i + 1 :]
    ]


def budgets(weak: Point | None, strong: Point | None) -> list[tuple[float, float]]:
    """(cost per 1k, share of the strong model's cost): the weak model's cost, then the shares
    of BUDGET_SHARES above it."""
    if strong is None or strong.cost_per_1k <= 0:
        return []
    top = strong.cost_per_1k
    out = [(weak.cost_per_1k, weak.cost_per_1k / top)] if weak is not None and weak is not strong else []
    floor = out[0][0] if out else 0.0
    out += [(share * top, share) for share in BUDGET_SHARES if share * top > floor]
    return out


def compute_frontier(
    singles: Sequence[Point],
    curve: Sequence[CurvePoint],
    weak: str | None = None,
    strong: str | None = None,
) -> Frontier:
    """The frontier report of a router's curve against the single models `singles` (all on
    the same questions). ValueError: a weak or strong model the run does not have."""
    hull = upper_hull(singles)
    weak_point, strong_point = weak_and_strong(singles, hull, weak, strong)
    ordered = sorted(curve, key=lambda c: (c.point.cost_per_1k, c.knob))
    knots = curve_knots([c.point for c in ordered], weak_point)
    margins = []
    for cost, share in budgets(weak_point, strong_point):
        router, best = curve_accuracy(knots, cost), hull_accuracy(hull, cost)
        if router is not None and best is not None:
            margins.append(
                BudgetMargin(
                    cost_per_1k=cost, share_of_strong=share, router=router, hull=best, margin=router - best
                )
            )
    recovered = None
    if weak_point is not None and strong_point is not None and weak_point is not strong_point:
        recovered = apgr(knots, weak_point, strong_point)
    return Frontier(
        questions=max((p.questions for p in singles), default=0),
        hull=hull,
        pairs=pair_mixes(singles),
        weak=weak_point.name if weak_point is not None else None,
        strong=strong_point.name if strong_point is not None else None,
        curve=ordered,
        apgr=recovered if curve else None,
        margins=margins,
    )
