"""Two guard configurations on the same held-out cases, paired (docs/security.md, "The
cascade"): each arm's catch and false-block rates with 95% Wilson intervals (`svc-sr benchmark
guard`'s arithmetic, app/benchmark/guard_report.py), the cases one arm refuses and the other
does not, and the exact McNemar p of those discordant pairs.

The cases are the held-out parts only: the hand-written sets' `heldout` rows and every
`tests/data/guard/heldout/` set, or the sets named by `--sets` (their `heldout` rows). Offline,
no Ray (app/benchmark/guard_run.py `run_offline`).

    .venv/bin/python scripts/compare_guard_arms.py --base configs/config.yaml \\
        --arm /tmp/cascade.yaml --out /tmp/arms.json

A code change (not a config) is compared across two checkouts: run each tree's arm alone
(`--base CONFIG --out old.json`, no `--arm`), then pair them (`--base old.json --arm new.json`):
an arm given as an earlier `--out` file is read, not run (its outcomes are kept in case order).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.benchmark.guard_report import CaseOutcome, GuardReport, summarize  # noqa: E402
from app.benchmark.guard_run import run_offline  # noqa: E402
from app.benchmark.guard_sets import GuardCase, load_cases  # noqa: E402
from app.benchmark.local_services import VectorTable, shared_vector_table  # noqa: E402
from app.common.intervals import mcnemar  # noqa: E402

GUARD_DATA = ROOT / "tests" / "data" / "guard"
HAND_WRITTEN = ("attacks", "everyday", "everyday_conversations", "everyday_hard")


def heldout_cases(sets: list[Path] | None = None) -> list[GuardCase]:
    if sets:
        return load_cases(sets, "heldout")
    hand = load_cases([GUARD_DATA / f"{name}.jsonl" for name in HAND_WRITTEN], "heldout")
    return hand + load_cases(sorted((GUARD_DATA / "heldout").glob("*.jsonl")))


def refused(o: CaseOutcome) -> bool:
    return o.caught if o.label != "benign" else o.blocked


def pairs(base: list[CaseOutcome], arm: list[CaseOutcome]) -> dict:
    out: dict = {}
    for label, word in (("attack", "caught"), ("benign", "refused")):
        idx = [i for i, o in enumerate(base) if (o.label == "benign") == (label == "benign")]
        gained = [i for i in idx if refused(arm[i]) and not refused(base[i])]
        lost = [i for i in idx if refused(base[i]) and not refused(arm[i])]
        out[label] = {
            f"newly_{word}": [arm[i].model_dump() for i in gained],
            f"no_longer_{word}": [base[i].model_dump() for i in lost],
            "mcnemar_p": mcnemar(len(gained), len(lost)),
        }
    return out


def brief(name: str, report: GuardReport) -> None:
    c, f = report.catch, report.false_block
    print(f"{name}: caught {c.hits}/{c.n} {c.rate:.2%} [{c.low:.2%}, {c.high:.2%}]; "
          f"refused {f.hits}/{f.n} {f.rate:.2%} [{f.low:.2%}, {f.high:.2%}]")  # fmt: skip
    for group, rates in report.attacks_by.items():
        print(f"  caught by {group}: " + ", ".join(f"{r.name} {r.hits}/{r.n}" for r in rates))
    for group, rates in report.benign_by.items():
        print(f"  refused by {group}: " + ", ".join(f"{r.name} {r.hits}/{r.n}" for r in rates))


def arm_outcomes(spec: str, name: str, cases: list[GuardCase], table: VectorTable) -> list[CaseOutcome]:
    """An arm's outcomes: an earlier `--out` file's (its arm of that name, else its only one),
    or the configuration `spec` run on the cases."""
    if not spec.endswith(".json"):
        return asyncio.run(run_offline(spec, cases, vectors=table))
    earlier = json.loads(Path(spec).read_text())["outcomes"]
    out = [CaseOutcome(**o) for o in earlier.get(name, earlier.get("arm", earlier["base"]))]
    if len(out) != len(cases):
        raise SystemExit(f"{spec} holds {len(out)} cases, not {len(cases)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=str(ROOT / "configs" / "config.yaml"))
    ap.add_argument("--arm", help="the other configuration (none: the base arm alone)")
    ap.add_argument("--out", type=Path, required=True, help="the arms' outcomes and the pairs (JSON)")
    ap.add_argument(
        "--sets", type=Path, nargs="+", help="these sets' heldout rows instead of the default ones"
    )
    args = ap.parse_args(argv)
    cases = heldout_cases(args.sets)
    table = shared_vector_table()  # one embedding per text for both arms
    outcomes = {
        name: arm_outcomes(spec, name, cases, table)
        for name, spec in (("base", args.base), ("arm", args.arm))
        if spec is not None
    }
    reports = {name: summarize(o) for name, o in outcomes.items()}
    for name, report in reports.items():
        brief(name, report)
    paired = pairs(outcomes["base"], outcomes["arm"]) if "arm" in outcomes else {}
    for label, p in paired.items():
        counts = {k: len(v) for k, v in p.items() if isinstance(v, list)}
        print(f"{label}: {counts}, exact McNemar p {p['mcnemar_p']:.3g}")
    dumped = {name: [o.model_dump() for o in arm] for name, arm in outcomes.items()}
    args.out.write_text(
        json.dumps(
            {"reports": {k: r.model_dump() for k, r in reports.items()}, "pairs": paired, "outcomes": dumped},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
