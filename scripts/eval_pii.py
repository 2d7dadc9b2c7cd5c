"""Evaluate app.models.pii.PIIDetector on a labeled synthetic set and on look-alike negatives.

Data (read out of the wheel fetched with `pip download --no-deps presidio-evaluator==0.3.2`; the
package is never imported): its 209 sentence templates (`data_generator/raw_data/templates.txt`),
3,000 fake identities (`FakeNameGenerator.com_3000.csv`), organisation and nationality lists, the
US driver-licence formats, and the template-name -> entity-type mapping, phone/address/age formats
(read with `ast` from its source, not executed).

Generation mirrors presidio-evaluator's PresidioSentenceFaker: pick a template uniformly; fill the
first use of a field from one random identity record and the rest from Faker (en_US, seeded);
lower-case 5 % of sentences. Differences, on purpose: literal "\\n" in templates becomes a newline;
IBANs come from six European Faker locales (not only GB) and half of IBANs / 16-digit cards are
written in 4-character groups, as people type them. A second slice draws only templates with a
structured placeholder (card, IBAN, SSN, IP, email, phone, driver licence, zip) so those types get
a few hundred examples each.

Scoring, per type: a predicted span is a true positive if it overlaps a gold span of the same type;
a gold span counts as found if some prediction of its type overlaps it (recall); "exact" recall
needs identical offsets. GPE/ZIP_CODE predictions that lie inside a gold STREET_ADDRESS (the
templates label "city, state zip" as part of the address, the reference router has separate types)
are ignored rather than counted as false positives. Template placeholders with no reference type
(TITLE: prefixes and job titles) are not scored, but predictions on them count as false positives.

Look-alike negatives (tests/data/pii_negatives.txt) must yield no entity at all.

Everyday slice: sentences from the project-written templates in
scripts/data/pii_everyday_templates.txt (salutations, sign-offs, direct address, @-mentions,
international phone layouts, clock times, separator-free cards), filled the same way, scored
together with the rest and also on their own. Also reported: the share of clean questions
(random MMLU-Pro questions plus the benign chat prompts) with a structured type, the share of
MMLU-Pro history/philosophy/law questions with a PERSON and with an NRP, and p50 at batch 1.

    .venv/bin/python scripts/eval_pii.py [--samples 3000 --structured 1500 --seed 42 --json out.json]
"""

from __future__ import annotations

import argparse
import ast
import csv
import functools
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.models.pii import PII_ENTITY_TYPES, PIIDetector  # noqa: E402

CACHE = Path(os.environ.get("SVC_SR_CACHE", "~/.cache/svc-sr")).expanduser()
WHEEL = ("presidio_evaluator", "0.3.2")
RAW = "presidio_evaluator/data_generator/raw_data/"
NEGATIVES = ROOT / "tests" / "data" / "pii_negatives.txt"
EVERYDAY = ROOT / "scripts" / "data" / "pii_everyday_templates.txt"
MMLU = ROOT.parent / "shared" / "data" / "mmlu-pro" / "questions.jsonl"
BENIGN_CHAT = ROOT / "tests" / "data" / "jailbreak_eval_benign.jsonl"
# Types a "clean question" must never trip (the card's structured types).
STRUCTURED_TYPES = ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "US_SSN", "IBAN_CODE", "IP_ADDRESS")
KNOWLEDGE_CATEGORIES = ("history", "philosophy", "law")
# Placeholders of the project-written everyday templates, beyond presidio-evaluator's.
EVERYDAY_TYPES = {
    "username": "PERSON",
    "intl_phone": "PHONE_NUMBER",
    "clock_time": "DATE_TIME",
    "card_plain": "CREDIT_CARD",
}
# International layouts people type: unusual groupings, "(0)" trunk digit, 00 prefix, dots, slashes.
INTL_PHONE_FORMATS = (
    "+44 20 #### ####",
    "+44 7### ######",
    "+49 (0)30 ####-####",
    "+49/30/########",
    "0044 20 #### ####",
    "0049 %## #######",
    "+91 9#### #####",
    "+33 %.##.##.##.##",
    "+33 % ## ## ## ##",
    "+1.%##.###.####",
    "+61 4## ### ###",
    "+39 3## ### ####",
    "+81-90-####-####",
    "+34 6## ## ## ##",
    "+353 (0)87 ### ####",
    "+7 495 ###-##-##",
)
_HOUR_WORDS = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]
STRUCTURED_FIELDS = {
    "credit_card_number",
    "iban",
    "ssn",
    "ip_address",
    "email",
    "phone_number",
    "us_driver_license",
    "zipcode",
}
IBAN_LOCALES = ("en_GB", "de_DE", "fr_FR", "nl_NL", "es_ES", "it_IT")


# --------------------------------------------------------------------------- wheel access


def fetch_wheel(cache: Path, offline: bool) -> Path:
    name, version = WHEEL
    cache.mkdir(parents=True, exist_ok=True)
    wheel = next(iter(cache.glob(f"{name}-{version}-*.whl")), None)
    if wheel is None and not offline:
        spec = f"{name.replace('_', '-')}=={version}"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", spec, "-d", str(cache)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wheel = next(iter(cache.glob(f"{name}-{version}-*.whl")), None)
    if wheel is None:
        raise SystemExit(f"{name}=={version} wheel not in {cache} (run without --offline once)")
    return wheel


def _assigned_literal(source: str, class_name: str | None, target: str) -> object:
    """Value of `target = <literal>` (in `class_name` if given), evaluated with ast.literal_eval;
    OrderedDict((k, v), ...) calls are read as their tuple argument."""
    tree = ast.parse(source)
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name] or [tree]
    for node in ast.walk(scopes[0]):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == target for t in node.targets
        ):
            value = node.value
            if isinstance(value, ast.Call):  # OrderedDict([...]) / OrderedDict((...))
                value = value.args[0]
            return ast.literal_eval(value)
    raise KeyError(f"{class_name}.{target} not found")


@dataclass
class EvaluatorData:
    templates: list[str]
    records: list[dict[str, str]]
    organizations: list[str]
    nationalities: list[dict[str, str]]
    dl_formats: list[str]
    type_mapping: dict[str, str]
    aliases: dict[str, str]
    phone_formats: list[str]
    address_formats: list[tuple[str, float]]
    age_formats: list[tuple[str, float]]


def load_evaluator_data(wheel: Path) -> EvaluatorData:
    import yaml

    with zipfile.ZipFile(wheel) as zf:

        def text(path: str) -> str:
            return zf.read(path).decode("utf-8-sig")

        templates = [t.strip() for t in text(RAW + "templates.txt").splitlines() if t.strip()]
        people = list(csv.DictReader(io.StringIO(text(RAW + "FakeNameGenerator.com_3000.csv"))))
        orgs = [
            r["organization"]
            for r in csv.DictReader(
                io.StringIO(text(RAW + "companies_and_organizations.csv")), delimiter="\t"
            )
        ]
        nats = list(csv.DictReader(io.StringIO(text(RAW + "nationalities.csv"))))
        dl_yaml = yaml.safe_load(text(RAW + "us_driver_license_format.yaml"))
        dl_formats = [f for fmts in dl_yaml["en"]["faker"]["driving_license"]["usa"].values() for f in fmts]
        faker_src = text("presidio_evaluator/data_generator/presidio_sentence_faker.py")
        prov_src = text("presidio_evaluator/data_generator/faker_extensions/providers.py")
    mapping = dict(_assigned_literal(faker_src, "PresidioSentenceFaker", "ENTITY_TYPE_MAPPING"))
    aliases = {
        new: old for old, new in _assigned_literal(faker_src, "PresidioSentenceFaker", "PROVIDER_ALIASES")
    }
    return EvaluatorData(
        templates=templates,
        records=[_record(p) for p in people],
        organizations=orgs,
        nationalities=nats,
        dl_formats=dl_formats,
        type_mapping=mapping,
        aliases=aliases,
        phone_formats=list(_assigned_literal(prov_src, "PhoneNumberProviderNew", "formats")),
        address_formats=list(_assigned_literal(prov_src, "AddressProviderNew", "address_formats")),
        age_formats=list(_assigned_literal(prov_src, "AgeProvider", "formats")),
    )


def _record(row: dict[str, str]) -> dict[str, str]:
    """Same renames as presidio-evaluator's load_fake_person_df (the card number is dropped there)."""
    rec = {
        "first_name": row["GivenName"],
        "last_name": row["Surname"],
        "middle_initial": row["MiddleInitial"],
        "prefix": row["Title"],
        "gender": row["Gender"],
        "nationality": row["NameSet"],
        "street_name": row["StreetAddress"],
        "city": row["City"],
        "state_abbr": row["State"],
        "state": row["StateFull"],
        "zipcode": row["ZipCode"],
        "country": row["CountryFull"],
        "email": row["EmailAddress"],
        "phone_number": row["TelephoneNumber"],
        "date_of_birth": row["Birthday"],
        "age": row["Age"],
        "job": row["Occupation"],
        "company": row["Company"],
        "domain_name": row["Domain"],
    }
    g = row["Gender"]
    for key, value in (
        ("first_name", row["GivenName"]),
        ("prefix", row["Title"]),
        ("last_name", row["Surname"]),
    ):
        rec[f"{key}_female"] = value if g == "female" else ""
        rec[f"{key}_male"] = value if g == "male" else ""
    return rec


# --------------------------------------------------------------------------- generation


@dataclass
class Sample:
    text: str
    spans: list[tuple[str, int, int]] = field(default_factory=list)  # (type, start, end)
    template_id: int = -1


class SentenceGenerator:
    def __init__(self, data: EvaluatorData, seed: int) -> None:
        from faker import Faker

        self.data = data
        self.rng = random.Random(seed)
        Faker.seed(seed)
        self.fake = Faker("en_US")
        self.iban_fakers = [Faker(loc) for loc in IBAN_LOCALES]
        self._providers = self._special_providers()

    # ---- value providers (Faker + presidio-evaluator's extra providers)

    def _numerify(self, fmt: str) -> str:
        out = []
        for ch in fmt:
            if ch == "#":
                out.append(str(self.rng.randint(0, 9)))
            elif ch == "%":
                out.append(str(self.rng.randint(1, 9)))
            elif ch == "?":
                out.append(chr(self.rng.randint(65, 90)))
            else:
                out.append(ch)
        return "".join(out)

    def _weighted(self, items: list[tuple[str, float]]) -> str:
        return self.rng.choices([i[0] for i in items], weights=[i[1] for i in items])[0]

    def _grouped(self, value: str, sep: str = " ") -> str:
        return sep.join(value[i : i + 4] for i in range(0, len(value), 4))

    def provide(self, name: str) -> str:
        name = self.data.aliases.get(name, name)
        special = self._providers.get(name)
        if special is not None:
            return special()
        return str(getattr(self.fake, name)())

    def _special_providers(self) -> dict[str, Callable[[], str]]:
        """Fields presidio-evaluator fills its own way (extra providers, formats from its data);
        every other field is the Faker method of that name."""
        f = self.fake
        nation_columns = {"nationality": "nationality", "nation_woman": "woman", "nation_man": "man"}
        providers: dict[str, Callable[[], str]] = {
            "credit_card_number": self._credit_card_number,
            "iban": self._iban,
            "ip_address": self._ip_address,
            "phone_number": lambda: self._numerify(self.rng.choice(self.data.phone_formats)),
            "address": self._address,
            "age": lambda: self._numerify(self._weighted(self.data.age_formats)),
            "us_driver_license": lambda: self._numerify(self.rng.choice(self.data.dl_formats)),
            "organization": lambda: self.rng.choice(self.data.organizations),
            "date_time": lambda: str(f.date_time().replace(microsecond=0)),
            "date_of_birth": lambda: str(f.date_of_birth()),
            "person": lambda: f.name(),
            "name": lambda: f.name(),
            "year": lambda: str(f.year()),
            "username": self._username,
            "intl_phone": lambda: self._numerify(self.rng.choice(INTL_PHONE_FORMATS)),
            "clock_time": self._clock_time,
            "card_plain": self._card_plain,
        }
        for name in ("nationality", "nation_woman", "nation_man", "nation_plural"):
            providers[name] = functools.partial(self._nationality, nation_columns.get(name, "plural"))
        return providers

    def _credit_card_number(self) -> str:
        cc = self.fake.credit_card_number()
        r = self.rng.random()
        if len(cc) == 16 and r < 0.4:
            return self._grouped(cc)
        if len(cc) == 16 and r < 0.5:
            return self._grouped(cc, "-")
        return cc

    def _username(self) -> str:
        """Handles as people sign chats: lower-case, digits, underscores, gamer-style casing."""
        first, last = self.fake.first_name().lower(), self.fake.last_name().lower()
        n = self.rng.randint(1, 99)
        forms = (
            f"{first}{n}",
            f"{first}_{last[:3]}",
            f"{first[0]}{last}{n}",
            f"xX_{first}{n}_Xx",
            f"{first}.{last}{n}",
            f"{first.capitalize()}{last.capitalize()}{n}",
        )
        return self.rng.choice(forms)

    def _clock_time(self) -> str:
        h, m = (
            self.rng.randint(1, 12),
            self.rng.choice(("00", "15", "30", "45", f"{self.rng.randint(0, 59):02d}")),
        )
        word = _HOUR_WORDS[h - 1]
        forms = (
            f"{h}:{m}pm",
            f"{h}:{m} am",
            f"{h}:{m} p.m.",
            f"{h} o'clock",
            f"{word} o'clock",
            f"{h}pm",
            f"{h} AM",
            f"half past {word}",
            f"quarter to {word}",
            f"{h}:{m} PM",
        )
        return self.rng.choice(forms)

    def _card_plain(self) -> str:
        while len(cc := self.fake.credit_card_number()) != 16:
            pass
        return cc

    def _iban(self) -> str:
        iban = self.rng.choice(self.iban_fakers).iban()
        return self._grouped(iban) if self.rng.random() < 0.5 else iban

    def _ip_address(self) -> str:
        return self.fake.ipv4() if self.rng.random() < 0.8 else self.fake.ipv6()

    def _address(self) -> str:
        fmt = self._weighted(self.data.address_formats)
        return re.sub(r"{{(\w+)}}", lambda m: str(getattr(self.fake, m.group(1))()), fmt)

    def _nationality(self, column: str) -> str:
        return self.rng.choice(self.data.nationalities)[column]

    def _from_record(self, rec: dict[str, str], name: str) -> str | None:
        if name in ("person", "name"):
            if "person" in rec:
                return rec.pop("person")
            return None
        value = rec.pop(name, None)
        return value or None

    def make(self, template_id: int) -> Sample:
        template = self.data.templates[template_id].replace("\\n", "\n").replace("\\,", ",")
        rec = dict(self.rng.choice(self.data.records))
        if self.rng.random() > 0.2:
            rec["person"] = f"{rec['first_name']} {rec['last_name']}"
        else:
            sep = " " if self.rng.random() > 0.5 else ". "
            rec["person"] = f"{rec['first_name']} {rec['middle_initial']}{sep}{rec['last_name']}"
        parts: list[str] = []
        spans: list[tuple[str, int, int]] = []
        pos = 0
        length = 0
        for m in re.finditer(r"{{\s*(\w+)\s*}}", template):
            parts.append(template[pos : m.start()])
            length += m.start() - pos
            name = m.group(1).lower()
            value = self._from_record(rec, name) or self.provide(name)
            etype = self.data.type_mapping.get(name, name.upper())
            spans.append((etype, length, length + len(value)))
            parts.append(value)
            length += len(value)
            pos = m.end()
        parts.append(template[pos:])
        text = "".join(parts)
        if self.rng.random() < 0.05:
            text = text.lower()
        return Sample(text=text, spans=_merge_adjacent(text, spans), template_id=template_id)


def load_everyday(data: EvaluatorData, path: Path = EVERYDAY) -> EvaluatorData:
    """The evaluator's data with the project-written everyday templates (salutations, sign-offs,
    direct address, international phones, clock times, separator-free cards) in place of its own."""
    templates = [t.strip() for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
    return replace(data, templates=templates, type_mapping=data.type_mapping | EVERYDAY_TYPES)


def _merge_adjacent(text: str, spans: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Placeholders of one type separated only by spaces/commas are one entity (an address made
    of building number + street + unit), as BIO tagging would see them."""
    merged: list[tuple[str, int, int]] = []
    for span in sorted(spans, key=lambda s: s[1]):
        if merged and merged[-1][0] == span[0] and re.fullmatch(r"[ ,]*", text[merged[-1][2] : span[1]]):
            merged[-1] = (span[0], merged[-1][1], span[2])
        else:
            merged.append(span)
    return merged


def generate(data: EvaluatorData, samples: int, structured: int, seed: int) -> list[Sample]:
    gen = SentenceGenerator(data, seed)
    out = [gen.make(gen.rng.randrange(len(data.templates))) for _ in range(samples)]
    pools: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(data.templates):
        for name in set(re.findall(r"{{\s*(\w+)\s*}}", t)):
            if name.lower() in STRUCTURED_FIELDS:
                pools[name.lower()].append(i)
    fields = sorted(pools)
    for k in range(structured):
        out.append(gen.make(gen.rng.choice(pools[fields[k % len(fields)]])))
    return out


# --------------------------------------------------------------------------- scoring


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def score(
    samples: list[Sample], predictions: list[list[tuple[str, int, int]]]
) -> dict[str, dict[str, float]]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for sample, preds in zip(samples, predictions, strict=True):
        gold = [s for s in sample.spans if s[0] in PII_ENTITY_TYPES]
        addresses = [(s[1], s[2]) for s in sample.spans if s[0] == "STREET_ADDRESS"]
        for etype, start, end in preds:
            same = [(g[1], g[2]) for g in gold if g[0] == etype]
            if any(_overlap((start, end), g) for g in same):
                counts[etype]["tp"] += 1
            elif etype in ("GPE", "ZIP_CODE") and any(a[0] <= start and end <= a[1] for a in addresses):
                counts[etype]["ignored"] += 1
            else:
                counts[etype]["fp"] += 1
        for etype, start, end in gold:
            counts[etype]["support"] += 1
            same = [(p[1], p[2]) for p in preds if p[0] == etype]
            if any(_overlap((start, end), p) for p in same):
                counts[etype]["found"] += 1
            if (start, end) in same:
                counts[etype]["exact"] += 1
    table: dict[str, dict[str, float]] = {}
    for etype in PII_ENTITY_TYPES:
        c = counts[etype]
        predicted = c["tp"] + c["fp"]
        table[etype] = {
            "support": c["support"],
            "predicted": predicted,
            "precision": c["tp"] / predicted if predicted else float("nan"),
            "recall": c["found"] / c["support"] if c["support"] else float("nan"),
            "exact_recall": c["exact"] / c["support"] if c["support"] else float("nan"),
            "ignored_nested": c["ignored"],
        }
    return table


def load_negatives(path: Path = NEGATIVES) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def _fmt(x: float) -> str:
    return "–" if x != x else f"{x:.3f}"


def markdown(table: dict[str, dict[str, float]]) -> str:
    rows = [
        "| Type | Support | Predicted | Precision | Recall (overlap) | Recall (exact span) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for etype, m in table.items():
        rows.append(
            f"| {etype} | {m['support']} | {m['predicted']} | {_fmt(m['precision'])} | {_fmt(m['recall'])} "
            f"| {_fmt(m['exact_recall'])} |"
        )
    return "\n".join(rows)


def load_mmlu(path: Path = MMLU) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def clean_questions(mmlu: list[dict[str, str]], n: int, seed: int) -> list[str]:
    """Questions that hold no PII: n random MMLU-Pro questions plus the benign chat prompts."""
    rng = random.Random(seed)
    texts = [q["question"] for q in rng.sample(mmlu, min(n, len(mmlu)))]
    with BENIGN_CHAT.open(encoding="utf-8") as fh:
        texts += [json.loads(line)["text"] for line in fh if line.strip()]
    return texts


def rate_with(results: list, types: tuple[str, ...]) -> tuple[float, list[str]]:
    """Share of texts with at least one entity of `types`, and those entities' values."""
    hits = [[e.value for e in r.entities if e.type in types] for r in results]
    flagged = [h for h in hits if h]
    return len(flagged) / max(len(results), 1), [v for h in flagged for v in h]


def p50_ms(detector: PIIDetector, texts: list[str]) -> float:
    """Median time of one detect() call (batch 1) over `texts`, after the detector's warm-up."""
    times = []
    for text in texts:
        t0 = time.perf_counter()
        detector.detect(text)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=3000, help="sentences from uniformly drawn templates")
    ap.add_argument("--structured", type=int, default=1500, help="extra sentences from structured templates")
    ap.add_argument("--everyday", type=int, default=600, help="sentences from the everyday templates")
    ap.add_argument("--clean", type=int, default=1500, help="random MMLU-Pro questions as clean texts")
    ap.add_argument("--latency", type=int, default=300, help="texts timed one by one for p50")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--wheel-cache", type=Path, default=CACHE / "pii-eval-wheels")
    ap.add_argument("--offline", action="store_true", help="never download; use the cached wheel")
    ap.add_argument("--json", type=Path, help="write metrics, settings and errors here")
    ap.add_argument(
        "--show-errors", type=int, default=0, help="print this many misses / false positives per type"
    )
    args = ap.parse_args()

    data = load_evaluator_data(fetch_wheel(args.wheel_cache, args.offline))
    samples = generate(data, args.samples, args.structured, args.seed)
    everyday = generate(load_everyday(data), args.everyday, 0, args.seed)
    detector = PIIDetector(threshold=args.threshold)
    started = time.perf_counter()
    results = detector.detect_many([s.text for s in samples + everyday])
    elapsed = time.perf_counter() - started
    preds = [[(e.type, e.start, e.end) for e in r.entities] for r in results]
    table = score(samples + everyday, preds)
    everyday_table = score(everyday, preds[len(samples) :])

    negatives = load_negatives()
    neg_results = detector.detect_many(negatives)
    neg_hits = [
        (t, [(e.type, e.value) for e in r.entities])
        for t, r in zip(negatives, neg_results, strict=True)
        if r.entities
    ]
    mmlu = load_mmlu()
    clean = clean_questions(mmlu, args.clean, args.seed)
    clean_rate, clean_values = rate_with(detector.detect_many(clean), STRUCTURED_TYPES)
    knowledge: dict[str, dict[str, object]] = {}
    for cat in KNOWLEDGE_CATEGORIES:
        qs = detector.detect_many([q["question"] for q in mmlu if q["category"] == cat])
        person, person_values = rate_with(qs, ("PERSON",))
        nrp, nrp_values = rate_with(qs, ("NRP",))
        knowledge[cat] = {
            "n": len(qs),
            "person_fp": person,
            "nrp_fp": nrp,
            "person_values": person_values,
            "nrp_values": nrp_values,
        }
    timed = [s.text for s in (samples + everyday)[:: max(1, len(samples + everyday) // args.latency)]]
    latency = p50_ms(detector, timed[: args.latency])

    print(
        f"# PII eval {date.today()}  samples={len(samples)}+{len(everyday)} everyday seed={args.seed} "
        f"threshold={args.threshold} ({elapsed / len(results) * 1000:.1f} ms/text in batches, "
        f"p50 {latency:.1f} ms/text at batch 1 over {len(timed[: args.latency])} texts)"
    )
    print(markdown(table))
    print("\n## Everyday slice (project-written templates)")
    print(markdown(everyday_table))
    print(f"\nLook-alike negatives: {len(negatives)} texts, {len(neg_hits)} with an entity")
    for text, ents in neg_hits:
        print(f"  FP: {text!r} -> {ents}")
    print(f"Clean questions ({len(clean)}) with a structured type: {clean_rate:.2%} {clean_values[:10]}")
    for cat, k in knowledge.items():
        print(
            f"MMLU-Pro {cat} ({k['n']}): PERSON {k['person_fp']:.2%}, NRP {k['nrp_fp']:.2%}; "
            f"e.g. {k['person_values'][:8]} {k['nrp_values'][:5]}"
        )
    if args.show_errors:
        _show_errors(samples + everyday, preds, args.show_errors)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": str(date.today()),
                    "settings": vars(args) | {"wheel_cache": str(args.wheel_cache), "json": str(args.json)},
                    "n_samples": len(samples) + len(everyday),
                    "ms_per_text_batched": elapsed / len(results) * 1000,
                    "p50_ms_batch1": latency,
                    "metrics": table,
                    "everyday_metrics": everyday_table,
                    "negatives": {"texts": len(negatives), "with_entities": len(neg_hits), "hits": neg_hits},
                    "clean_structured_rate": clean_rate,
                    "clean_structured_values": clean_values,
                    "knowledge_fp": knowledge,
                },
                indent=2,
                default=str,
            )
        )


def _show_errors(samples: list[Sample], preds: list[list[tuple[str, int, int]]], limit: int) -> None:
    misses: dict[str, list[str]] = defaultdict(list)
    fps: dict[str, list[str]] = defaultdict(list)
    for s, p in zip(samples, preds, strict=True):
        addresses = [(g[1], g[2]) for g in s.spans if g[0] == "STREET_ADDRESS"]
        for etype, a, b in s.spans:
            if etype in PII_ENTITY_TYPES and not any(
                q[0] == etype and _overlap((a, b), (q[1], q[2])) for q in p
            ):
                misses[etype].append(f"{s.text[a:b]!r} in {s.text[:120]!r}")
        for etype, a, b in p:
            if any(g[0] == etype and _overlap((a, b), (g[1], g[2])) for g in s.spans):
                continue
            if etype in ("GPE", "ZIP_CODE") and any(x <= a and b <= y for x, y in addresses):
                continue  # ignored in scoring, see module docstring
            fps[etype].append(f"{s.text[a:b]!r} in {s.text[:120]!r}")
    for title, errs in (("MISSES", misses), ("FALSE POSITIVES", fps)):
        print(f"\n## {title}")
        for etype in sorted(errs):
            print(f"### {etype} ({len(errs[etype])})")
            for line in errs[etype][:limit]:
                print("   ", line)


if __name__ == "__main__":
    main()
