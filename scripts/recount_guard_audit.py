"""Re-count a saved guard report on the audited labels (tests/data/guard/label_audit/), without
running any model: an audited attack that the report's run refused counts as caught, one it let
through as missed; an unclear row counts nowhere (the set builder leaves it out).

A saved report (`svc-sr benchmark guard --json`, or an arm of scripts/compare_guard_arms.py's
`--out`) lists every refused benign row, so each audited row's outcome is read from its
`false_blocks` (matched on source and the row's preview) and every rate is adjusted: the catch and
false-block rates, and their breakdowns by source and category.

    .venv/bin/python scripts/recount_guard_audit.py \\
        bench/results/guard-encoder3-heldout-2026-11-30.json --report reports.base --report reports.arm \\
        --out bench/results/guard-heldout-audited-2026-11-30.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from build_guard_sets import AuditRow, read_audits  # noqa: E402

from app.benchmark.guard_report import CaseOutcome, GuardReport, Rate  # noqa: E402
from app.benchmark.guard_run import PREVIEW_CHARS  # noqa: E402
from app.common.intervals import mcnemar  # noqa: E402


def preview(text: str) -> str:
    """The benchmark's preview of a text (app/benchmark/guard_run.py `_preview`)."""
    return " ".join(text.split())[:PREVIEW_CHARS]


def _shift(rates: list[Rate], name: str, hits: int, n: int) -> list[Rate]:
    """The breakdown with `hits` of `n` added to (or, negative, taken from) the group `name`."""
    counts = {r.name: [r.hits, r.n] for r in rates}
    h, m = counts.get(name, [0, 0])
    counts[name] = [h + hits, m + n]
    return [Rate.of(k, h, m) for k, (h, m) in sorted(counts.items()) if m > 0]


def refused_rows(report: GuardReport, audits: list[AuditRow]) -> list[bool]:
    """Whether the report's run refused each audited row (then labelled benign)."""
    blocked = {(o.source, o.preview) for o in report.false_blocks}
    return [(a.source, preview(a.text)) in blocked for a in audits]


def recount(report: GuardReport, audits: list[AuditRow]) -> GuardReport:
    """The report as its run would read on the audited labels."""
    out = report.model_copy(deep=True)
    refused = refused_rows(report, audits)
    gone = {(a.source, preview(a.text)) for a in audits}
    out.false_blocks = [o for o in report.false_blocks if (o.source, o.preview) not in gone]
    fb, catch = out.false_block, out.catch
    out.false_block = Rate.of(fb.name, fb.hits - sum(refused), fb.n - len(audits))
    for a, was_refused in zip(audits, refused, strict=True):
        for group in ("source", "category"):
            name = a.source if group == "source" else "benign"  # the rows were filed benign
            out.benign_by[group] = _shift(out.benign_by[group], name, -int(was_refused), -1)
        if a.verdict != "attack":
            continue
        assert a.category is not None  # AuditRow: an attack has its category
        catch = Rate.of(catch.name, catch.hits + int(was_refused), catch.n + 1)
        for group, name in (("source", a.source), ("category", a.category)):
            out.attacks_by[group] = _shift(out.attacks_by.get(group, []), name, int(was_refused), 1)
        if not was_refused:
            out.missed.append(
                CaseOutcome(label="attack", category=a.category, source=a.source, preview=preview(a.text))
            )
    out.catch = catch
    return out


def recount_pairs(pairs: dict, base: GuardReport, arm: GuardReport, audits: list[AuditRow]) -> dict:
    """scripts/compare_guard_arms.py's discordant pairs on the audited labels, with the exact
    McNemar p: an audited row leaves the benign pairs, an audited attack joins the attack pairs."""
    gone = {(a.source, preview(a.text)) for a in audits}
    benign = [sum((o["source"], o["preview"]) not in gone for o in pairs["benign"][k])
              for k in ("newly_refused", "no_longer_refused")]  # fmt: skip
    attack = [len(pairs["attack"][k]) for k in ("newly_caught", "no_longer_caught")]
    for a, b, r in zip(audits, refused_rows(base, audits), refused_rows(arm, audits), strict=True):
        if a.verdict == "attack":
            attack[0] += int(r and not b)
            attack[1] += int(b and not r)
    return {
        "attack": {"newly_caught": attack[0], "no_longer_caught": attack[1], "mcnemar_p": mcnemar(*attack)},
        "benign": {"newly_refused": benign[0], "no_longer_refused": benign[1], "mcnemar_p": mcnemar(*benign)},
    }


def _brief(r: GuardReport) -> dict:
    return {
        "caught": r.catch.model_dump(),
        "refused": r.false_block.model_dump(),
        "caught_by_source": [x.model_dump() for x in r.attacks_by.get("source", [])],
        "refused_by_source": [x.model_dump() for x in r.benign_by.get("source", [])],
        "caught_by_category": [x.model_dump() for x in r.attacks_by.get("category", [])],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("saved", type=Path, help="a saved report JSON")
    ap.add_argument("--report", action="append", default=[], help="dotted path of a report in it")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    doc = json.loads(args.saved.read_text())
    audits = read_audits()
    result: dict = {"saved": str(args.saved), "audits": len(audits), "reports": {}}
    recounted = {}
    for path in args.report or [""]:
        raw = doc
        for part in filter(None, path.split(".")):
            raw = raw[part]
        old = GuardReport(**raw)
        new = recount(old, audits)
        recounted[path] = (old, new)
        result["reports"][path or "report"] = {
            "audited_rows_refused": sum(refused_rows(old, audits)),
            "published": _brief(old),
            "audited": _brief(new),
        }
        c, f = new.catch, new.false_block
        print(f"{path}: caught {old.catch.hits}/{old.catch.n} -> {c.hits}/{c.n} [{c.low:.2%}, {c.high:.2%}]; "
              f"refused {old.false_block.hits}/{old.false_block.n} -> {f.hits}/{f.n} {f.rate:.2%} "
              f"[{f.low:.2%}, {f.high:.2%}]")  # fmt: skip
    if len(recounted) == 2 and "pairs" in doc:
        (base, _), (arm, _) = recounted.values()
        result["pairs"] = recount_pairs(doc["pairs"], base, arm, audits)
        print("paired:", result["pairs"])
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
