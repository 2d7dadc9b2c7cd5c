"""Labelled rows for `svc-srun train` tests, written by the test (no download): templated
customer-support requests for sequence classification and sentences carrying e-mail
addresses and people's names for token classification. Seeded, so a file is reproducible."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

INTENTS = {
    "billing": [
        "I was charged twice for my {thing}",
        "why is there an extra fee on my {thing} invoice",
        "please refund the payment for my {thing}",
        "my credit card was billed for the {thing} again",
        "the price on my {thing} bill is wrong",
    ],
    "shipping": [
        "where is my {thing}, it has not arrived",
        "when will the {thing} be delivered",
        "the tracking number for my {thing} does not work",
        "my {thing} is stuck at the courier",
        "can you ship the {thing} to a different address",
    ],
    "returns": [
        "I want to return the {thing} I bought",
        "how do I send back a broken {thing}",
        "the {thing} does not fit, can I exchange it",
        "I need a return label for my {thing}",
        "can I get a replacement for the damaged {thing}",
    ],
}
THINGS = ["order", "laptop", "phone", "jacket", "headphones", "chair", "camera", "book", "lamp", "shoes"]
NAMES = ["alice martin", "bob stone", "carla diaz", "deepak rao", "emma novak", "farid haddad", "grace lee"]
DOMAINS = ["example.com", "mail.org", "corp.net"]
SENTENCES = [
    "please contact {name} at {email} about the invoice",
    "{name} wrote from {email} yesterday",
    "send the report to {email} and copy {name}",
    "my colleague {name} uses {email} for work",
    "forward this to {email}, thanks",
    "{name} will call you tomorrow",
    "the meeting with {name} is at noon",
]


def sequence_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    labels = sorted(INTENTS)
    rows = []
    for i in range(n):
        label = labels[i % len(labels)]
        rows.append({"text": rng.choice(INTENTS[label]).format(thing=rng.choice(THINGS)), "label": label})
    return rows


def token_rows(n: int, seed: int = 0) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for _ in range(n):
        name = rng.choice(NAMES)
        email = f"{name.split()[0]}.{rng.randint(1, 99)}@{rng.choice(DOMAINS)}"
        template = rng.choice(SENTENCES)
        text, spans = "", []
        for piece in template.replace("{", "\0{").replace("}", "}\0").split("\0"):
            value = {"{name}": (name, "PERSON"), "{email}": (email, "EMAIL")}.get(piece)
            if value is None:
                text += piece
                continue
            spans.append({"start": len(text), "end": len(text) + len(value[0]), "label": value[1]})
            text += value[0]
        rows.append({"text": text, "spans": spans})
    return rows


def write_jsonl(path: Path, rows: list[dict[str, object]] | list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path: Path, rows: list[dict[str, object]] | list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    return path
