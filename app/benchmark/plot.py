"""The accuracy-vs-cost plot of `svc-sr benchmark report --plot FILE.png`: every single model as
a labelled point, the random mixes of every pair (faint lines), their hull (the best fixed mix
at each cost), the per-category best, the oracle, the run(s) highlighted and the router's
curve over its knob.

Cost is per 1,000 queries, so runs over different question sets share an axis. matplotlib is
imported inside the function: the CLI must start fast, and most commands never plot.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from app.benchmark.baselines import Baselines, Point
from app.benchmark.frontier import Frontier

RUN_COLORS = ["tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink"]


def render_accuracy_vs_cost(
    baselines: Baselines, runs: Sequence[Point], frontier: Frontier | None = None
) -> bytes:
    """The plot as PNG bytes (the caller writes them, atomically).

    The cost axis is logarithmic (ten models span two orders of magnitude) unless a point costs
    nothing (models without pricing), which a log axis cannot show.
    """
    from matplotlib.figure import Figure  # Agg by default when no pyplot backend is chosen
    from matplotlib.ticker import FuncFormatter

    figure = Figure(figsize=(9, 6), dpi=100)
    axes = figure.subplots()
    curve: list[Point] = []
    if frontier is not None:
        _draw_frontier(axes, frontier)
        curve = [c.point for c in frontier.curve]
    for model in baselines.models:
        axes.scatter(model.cost_per_1k, model.accuracy, color="tab:gray", s=30, zorder=2)
        axes.annotate(
            model.name,
            (model.cost_per_1k, model.accuracy),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    for reference, marker, color in (
        (baselines.category_best, "s", "tab:blue"),
        (baselines.oracle, "*", "tab:green"),
    ):
        axes.scatter(
            reference.cost_per_1k,
            reference.accuracy,
            marker=marker,
            s=120,
            color=color,
            label=f"{reference.name} ({reference.accuracy:.3f})",
            zorder=3,
        )
    for run, color in zip(runs, RUN_COLORS * len(runs), strict=False):
        axes.scatter(
            run.cost_per_1k,
            run.accuracy,
            marker="D",
            s=90,
            color=color,
            edgecolors="black",
            label=f"run {run.name} ({run.accuracy:.3f})",
            zorder=4,
        )
    points = [*baselines.models, baselines.category_best, baselines.oracle, *runs, *curve]
    logarithmic = min(point.cost_per_1k for point in points) > 0
    if logarithmic:
        axes.set_xscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"${value:g}"))
    axes.xaxis.set_minor_formatter(FuncFormatter(_sparse_dollars))
    axes.tick_params(axis="x", which="both", labelsize=8)
    axes.margins(x=0.12)  # room for the rightmost point's label
    axes.set_xlabel("cost per 1,000 queries" + (" (log scale)" if logarithmic else ""))
    axes.set_ylabel("accuracy")
    axes.set_title(f"accuracy vs cost on {baselines.questions} questions")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png")
    return image.getvalue()


def _draw_frontier(axes: Any, frontier: Frontier) -> None:
    for pair in frontier.pairs:
        xs, ys = (pair.cheap_cost_per_1k, pair.dear_cost_per_1k), (pair.cheap_accuracy, pair.dear_accuracy)
        axes.plot(xs, ys, color="tab:gray", alpha=0.15, linewidth=0.8, zorder=1)
    hull = frontier.hull
    axes.plot(
        [p.cost_per_1k for p in hull], [p.accuracy for p in hull], color="black", linestyle="--",
        linewidth=1.2, label="best random mix of two models (hull)", zorder=2,
    )  # fmt: skip
    if len(frontier.curve) > 1:
        axes.plot(
            [c.point.cost_per_1k for c in frontier.curve], [c.point.accuracy for c in frontier.curve],
            color="tab:red", marker="o", markersize=4, linewidth=1.5, zorder=4,
            label="router over its knob" + (f" (APGR {frontier.apgr:.2f})" if frontier.apgr is not None else ""),
        )  # fmt: skip


def _sparse_dollars(value: float, _position: object) -> str:
    """Label the log axis's minor ticks at 2, 3 and 5 of each decade only: all of them overlap."""
    if value <= 0:
        return ""
    leading = round(value / 10 ** math.floor(math.log10(value)))
    return f"${value:g}" if leading in (2, 3, 5) else ""
