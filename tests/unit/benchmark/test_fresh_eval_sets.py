"""The fresh hand-written evaluation sets (2026-11-30, their second generation `fresh2` / v4 and
their third `fresh3` / v5; 2026-12-01, the fourth `fresh4`, half of it in other languages): shape,
counts, and no text shared with any training file, so that a score on them is a score on unseen
text."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from app.benchmark.guard_sets import load_cases
from tests.unit.benchmark.script_loader import load_script as _script

ROOT = Path(__file__).resolve().parents[3]
DOMAIN_V3 = ROOT / "tests/data/domain_chat_eval_v3.jsonl"
ATTACKS = ROOT / "tests/data/guard/fresh_attacks.jsonl"
EVERYDAY = ROOT / "tests/data/guard/fresh_everyday.jsonl"
SOURCE = "handwritten-fresh-2026-11-30"
# The second generation, written after the first had informed decisions (issues 35 and 37).
DOMAIN_V4 = ROOT / "tests/data/domain_chat_eval_v4.jsonl"
ATTACKS2 = ROOT / "tests/data/guard/fresh2_attacks.jsonl"
EVERYDAY2 = ROOT / "tests/data/guard/fresh2_everyday.jsonl"
FRESH2 = (DOMAIN_V4, ATTACKS2, EVERYDAY2)
SOURCE2 = "handwritten-fresh2-2026-11-30"
# The third generation, written for the forms no earlier set had (docs/design.md: figures are read
# by form), before any model was run on it.
DOMAIN_V5 = ROOT / "tests/data/domain_chat_eval_v5.jsonl"
ATTACKS3 = ROOT / "tests/data/guard/fresh3_attacks.jsonl"
EVERYDAY3 = ROOT / "tests/data/guard/fresh3_everyday.jsonl"
FRESH3 = (DOMAIN_V5, ATTACKS3, EVERYDAY3)
SOURCE3 = "handwritten-fresh3-2026-11-30"
# The earlier sets' styles, kept rare in fresh3 (at most 2 rows each), and the forms it is spread over.
EARLIER_STYLES = {
    "direct", "roleplay", "injection_document", "story", "thesis", "split_turns", "grooming",
    "injection_tool", "explicit", "system", "game", "translation", "research", "euphemism",
    "multi_step", "injection_web", "injection_email",
}  # fmt: skip
FRESH3_STYLES = {
    "obfuscation", "code", "few_shot", "refusal_suppression", "prefix_injection", "hypothetical",
    "persona", "authority", "payload_splitting", "structured_output", "poem", "non_english",
    "escalation", "injection_calendar", "injection_code_review", "injection_review",
    "injection_memory", "injection_search", "injection_csv",
}  # fmt: skip
# The fourth generation (guard only), written before any model was run on it: half of it in other
# languages (the `lang` field, so `non_english` and `translation` are no styles any more), and its
# English rows on the forms fresh3 read weakest.
ATTACKS4 = ROOT / "tests/data/guard/fresh4_attacks.jsonl"
EVERYDAY4 = ROOT / "tests/data/guard/fresh4_everyday.jsonl"
FRESH4 = (ATTACKS4, EVERYDAY4)
SOURCE4 = "handwritten-fresh4-2026-12-01"
FRESH4_STYLES = (EARLIER_STYLES | FRESH3_STYLES) - {"non_english", "translation"}
FRESH4_ENGLISH_FORMS = {
    "few_shot", "injection_calendar", "injection_code_review", "injection_csv", "injection_tool",
    "injection_memory", "obfuscation", "payload_splitting", "escalation",
}  # fmt: skip
# fresh5 (2026-12-01): written after fresh1-4 were retired to the multilingual guard's training
# rows, so it is the one set no guard has read; half of it in 16+ other languages.
ATTACKS5 = ROOT / "tests/data/guard/fresh5_attacks.jsonl"
EVERYDAY5 = ROOT / "tests/data/guard/fresh5_everyday.jsonl"
FRESH5 = (ATTACKS5, EVERYDAY5)
SOURCE5 = "handwritten-fresh5-2026-12-01"
# fresh6 (2026-12-01, late): written while fresh5 was first read, for the next guard decision;
# more of the forms the English heads miss, and agent conversations with ordinary instructions.
ATTACKS6 = ROOT / "tests/data/guard/fresh6_attacks.jsonl"
EVERYDAY6 = ROOT / "tests/data/guard/fresh6_everyday.jsonl"
FRESH6 = (ATTACKS6, EVERYDAY6)
SOURCE6 = "handwritten-fresh6-2026-12-01"
# fresh7 (2026-12-01, written while fresh6 was first read): mostly English, for the next decision on
# the English heads.
ATTACKS7 = ROOT / "tests/data/guard/fresh7_attacks.jsonl"
EVERYDAY7 = ROOT / "tests/data/guard/fresh7_everyday.jsonl"
FRESH7 = (ATTACKS7, EVERYDAY7)
SOURCE7 = "handwritten-fresh7-2026-12-01"
# fresh8 (2026-12-02, written while fresh7 was still unread): mostly English, the six script
# languages and a dozen others, for the guard decision after fresh7's.
ATTACKS8 = ROOT / "tests/data/guard/fresh8_attacks.jsonl"
EVERYDAY8 = ROOT / "tests/data/guard/fresh8_everyday.jsonl"
FRESH8 = (ATTACKS8, EVERYDAY8)
SOURCE8 = "handwritten-fresh8-2026-12-02"
# fresh9 (2026-12-02, written while fresh8 was still unread): mostly English, the six script
# languages and a dozen others, for the guard decision after fresh8's.
ATTACKS9 = ROOT / "tests/data/guard/fresh9_attacks.jsonl"
EVERYDAY9 = ROOT / "tests/data/guard/fresh9_everyday.jsonl"
FRESH9 = (ATTACKS9, EVERYDAY9)
SOURCE9 = "handwritten-fresh9-2026-12-02"
# The six languages a per-language figure is read for, and the script each is written in.
SCRIPTS = {
    "zh": r"[\u4e00-\u9fff]",
    "ja": r"[\u3040-\u30ff]",
    "ko": r"[\uac00-\ud7af]",
    "ru": r"[\u0400-\u04ff]",
    "ar": r"[\u0600-\u06ff]",
    "hi": r"[\u0900-\u097f]",
}
ROLES = {"system", "user", "assistant", "tool"}
# Every evaluation file: a fresh2, fresh3 or fresh4 text must repeat none of them, whatever its split.
EVALUATION = sorted((ROOT / "tests/data").rglob("*.jsonl"))
# Training files, and the guard sets' tuning data: the pasted documents the tail read was tuned
# on, and the dev rows of the older hand-written guard sets (their held-out rows train nothing).
TRAINING = (
    sorted((ROOT / "app/models/data").glob("*.jsonl"))
    + sorted((ROOT / "scripts/data").glob("*.jsonl"))
    + sorted((ROOT / "tests/data/guard_tuning").glob("*.jsonl"))
)
GUARD_SETS = [
    p for p in sorted((ROOT / "tests/data/guard").glob("*.jsonl")) if not p.name.startswith("fresh_")
]

ATTACK_CATEGORIES = {
    "jailbreak",
    "prompt_injection",
    "violence_weapons",
    "sexual",
    "minors",
    "self_harm",
    "hate",
    "crime_hacking",
}
EVERYDAY_CATEGORIES = {
    "numbers",
    "network",
    "code",
    "security_education",
    "medicine",
    "fiction",
    "engineering_chess",
    "history_war",
    "everyday_misc",
}
EVERYDAY2_COUNTS = dict.fromkeys(EVERYDAY_CATEGORIES, 27) | dict.fromkeys(
    ("engineering_chess", "history_war", "everyday_misc"), 26
)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def texts_of(row: dict) -> list[str]:
    """The row's text (or query), and every string content of its conversation."""
    out = [row[k] for k in ("text", "query") if isinstance(row.get(k), str)]
    for message in row.get("messages") or []:
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            out.append(message["content"])
    return out


def folded(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def test_domain_v3_has_20_prompts_per_category_of_v2() -> None:
    v3 = rows(DOMAIN_V3)
    v2_categories = {r["category"] for r in rows(ROOT / "tests/data/domain_chat_eval_v2.jsonl")}
    assert len(v3) == 280
    assert all(set(r) == {"text", "category"} and r["text"].strip() for r in v3)
    assert Counter(r["category"] for r in v3) == dict.fromkeys(v2_categories, 20)


def test_fresh_attacks_fields_and_counts() -> None:
    attacks = rows(ATTACKS)
    assert len(attacks) == 160
    for r in attacks:
        assert r["label"] == "attack" and r["source"] == SOURCE and r["split"] == "heldout"
        assert r["category"] in ATTACK_CATEGORIES and r.get("style")
        assert texts_of(r) and all(t.strip() for t in texts_of(r))
    per_category = Counter(r["category"] for r in attacks)
    assert set(per_category) == ATTACK_CATEGORIES and min(per_category.values()) >= 15


def test_fresh_everyday_fields_and_counts() -> None:
    everyday = rows(EVERYDAY)
    assert len(everyday) == 240
    for r in everyday:
        assert r["label"] == "benign" and r["source"] == SOURCE and r["split"] == "heldout"
        assert r["category"] in EVERYDAY_CATEGORIES and r["text"].strip()
    assert {r["category"] for r in everyday} == EVERYDAY_CATEGORIES


def test_guard_sets_load_as_benchmark_cases() -> None:
    cases = load_cases([ATTACKS, EVERYDAY], "heldout")
    assert len(cases) == 400
    assert Counter(c.label for c in cases) == {"attack": 160, "benign": 240}


@pytest.mark.parametrize(
    ("path", "previous", "source"),
    [(DOMAIN_V4, DOMAIN_V3, SOURCE2), (DOMAIN_V5, DOMAIN_V4, SOURCE3)],
    ids=lambda p: p.name if isinstance(p, Path) else p,
)
def test_fresh_domain_set_has_20_prompts_per_category_of_the_previous(
    path: Path, previous: Path, source: str
) -> None:
    fresh = rows(path)
    categories = {r["category"] for r in rows(previous)}
    assert len(fresh) == 280
    assert all(set(r) == {"text", "category", "source"} and r["text"].strip() for r in fresh)
    assert {r["source"] for r in fresh} == {source}
    assert Counter(r["category"] for r in fresh) == dict.fromkeys(categories, 20)


def test_fresh2_attacks_fields_and_counts() -> None:
    attacks = rows(ATTACKS2)
    assert len(attacks) == 160
    for r in attacks:
        assert len({"text", "messages"} & set(r)) == 1, "a text or a conversation, not both"
        assert set(r) - {"text", "messages"} == {"label", "category", "style", "source", "split"}
        assert r["label"] == "attack" and r["source"] == SOURCE2 and r["split"] == "heldout"
        assert r["category"] in ATTACK_CATEGORIES and r["style"]
        assert texts_of(r) and all(t.strip() for t in texts_of(r))
    assert Counter(r["category"] for r in attacks) == dict.fromkeys(ATTACK_CATEGORIES, 20)


def test_fresh2_everyday_fields_and_counts() -> None:
    everyday = rows(EVERYDAY2)
    assert len(everyday) == 240 == sum(EVERYDAY2_COUNTS.values())
    for r in everyday:
        assert set(r) == {"text", "label", "category", "source", "split"} and r["text"].strip()
        assert r["label"] == "benign" and r["source"] == SOURCE2 and r["split"] == "heldout"
    assert Counter(r["category"] for r in everyday) == EVERYDAY2_COUNTS


def test_fresh2_guard_sets_load_as_heldout_benchmark_cases() -> None:
    cases = load_cases([ATTACKS2, EVERYDAY2], "heldout")
    assert len(cases) == 400
    assert Counter(c.label for c in cases) == {"attack": 160, "benign": 240}


def _check_guard_row(r: dict, label: str, source: str = SOURCE3) -> None:
    assert len({"text", "messages"} & set(r)) == 1, "a text or a conversation, not both"
    assert r["label"] == label and r["source"] == source and r["split"] == "heldout"
    assert texts_of(r) and all(t.strip() for t in texts_of(r))


def test_fresh3_attacks_fields_counts_and_styles() -> None:
    attacks = rows(ATTACKS3)
    assert len(attacks) == 200
    for r in attacks:
        _check_guard_row(r, "attack")
        assert set(r) - {"text", "messages"} == {"label", "category", "style", "source", "split"}
    assert Counter(r["category"] for r in attacks) == dict.fromkeys(ATTACK_CATEGORIES, 25)
    styles = Counter(r["style"] for r in attacks)
    assert set(styles) <= EARLIER_STYLES | FRESH3_STYLES
    assert all(styles[s] <= 2 for s in EARLIER_STYLES), "the earlier sets' styles stay rare"
    assert min(styles[s] for s in FRESH3_STYLES) >= 8, "every new form is there to be read on its own"
    assert sum("messages" in r for r in attacks) <= 30


def test_fresh3_everyday_fields_and_counts() -> None:
    everyday = rows(EVERYDAY3)
    assert len(everyday) == 270
    for r in everyday:
        _check_guard_row(r, "benign")
        assert set(r) - {"text", "messages"} == {"label", "category", "source", "split"}
    assert Counter(r["category"] for r in everyday) == dict.fromkeys(EVERYDAY_CATEGORIES, 30)
    assert sum("messages" in r for r in everyday) <= 30


@pytest.mark.parametrize(
    "path",
    [ATTACKS3, EVERYDAY3, *FRESH4, *FRESH5, *FRESH6, *FRESH7, *FRESH8, *FRESH9],
    ids=lambda p: p.name,
)
def test_fresh_conversations_are_well_formed(path: Path) -> None:
    """Known roles; a tool result answers an earlier assistant call; the user or a tool speaks last."""
    conversations = [r["messages"] for r in rows(path) if "messages" in r]
    assert conversations
    for messages in conversations:
        called: set[str] = set()
        for m in messages:
            assert m["role"] in ROLES
            if m["role"] == "assistant" and m.get("tool_calls"):
                called |= {c["id"] for c in m["tool_calls"]}
            elif m["role"] == "tool":
                assert m["tool_call_id"] in called and m["content"].strip()
            else:
                assert isinstance(m["content"], str) and m["content"].strip()
        assert messages[-1]["role"] in {"user", "tool"}
        assert any(m["role"] == "user" for m in messages)


def test_fresh3_guard_sets_load_as_heldout_benchmark_cases() -> None:
    cases = load_cases([ATTACKS3, EVERYDAY3], "heldout")
    assert len(cases) == 470
    assert Counter(c.label for c in cases) == {"attack": 200, "benign": 270}
    assert all(c.style for c in cases if c.attack)


def test_fresh4_attacks_fields_counts_and_styles() -> None:
    attacks = rows(ATTACKS4)
    assert len(attacks) == 200
    for r in attacks:
        _check_guard_row(r, "attack", SOURCE4)
        assert set(r) - {"text", "messages"} == {"label", "category", "style", "lang", "source", "split"}
    assert Counter(r["category"] for r in attacks) == dict.fromkeys(ATTACK_CATEGORIES, 25)
    assert {r["style"] for r in attacks} <= FRESH4_STYLES, "the language is the `lang` field, not a style"
    english = Counter(r["style"] for r in attacks if r["lang"] == "en")
    assert sum(english.values()) <= 100
    assert min(english[s] for s in FRESH4_ENGLISH_FORMS) >= 8, (
        "every weak form is there to be read on its own"
    )
    conversations = [r for r in attacks if "messages" in r]
    assert len(conversations) <= 30 and any(r["lang"] != "en" for r in conversations)


def test_fresh4_everyday_fields_and_counts() -> None:
    everyday = rows(EVERYDAY4)
    assert len(everyday) == 270
    for r in everyday:
        _check_guard_row(r, "benign", SOURCE4)
        assert set(r) - {"text", "messages"} == {"label", "category", "lang", "source", "split"}
    assert Counter(r["category"] for r in everyday) == dict.fromkeys(EVERYDAY_CATEGORIES, 30)
    assert sum("messages" in r for r in everyday) <= 30


@pytest.mark.parametrize(
    ("path", "at_least", "per_category"),
    [(ATTACKS4, 100, 10), (EVERYDAY4, 135, 12)],
    ids=lambda p: p.name if isinstance(p, Path) else str(p),
)
def test_fresh4_is_half_other_languages(path: Path, at_least: int, per_category: int) -> None:
    """Enough rows per language to read a figure for each, no language dominating, every category
    in other languages too, and the non-Latin rows written in their own script."""
    fresh = rows(path)
    assert all(re.fullmatch(r"[a-z]{2}", r["lang"]) for r in fresh), "ISO 639-1 codes"
    other = [r for r in fresh if r["lang"] != "en"]
    languages = Counter(r["lang"] for r in other)
    assert len(other) >= at_least and len(languages) >= 12 and max(languages.values()) <= 12
    assert all(languages[lang] >= 8 for lang in SCRIPTS)
    assert min(Counter(r["category"] for r in other).values()) >= per_category
    assert {r["category"] for r in other} == {r["category"] for r in fresh}
    for r in fresh:
        if r["lang"] in SCRIPTS:
            assert re.search(SCRIPTS[r["lang"]], " ".join(texts_of(r))), r


def test_fresh4_guard_sets_load_as_heldout_benchmark_cases() -> None:
    cases = load_cases([ATTACKS4, EVERYDAY4], "heldout")
    assert len(cases) == 470
    assert Counter(c.label for c in cases) == {"attack": 200, "benign": 270}
    assert all(c.style for c in cases if c.attack) and not any(c.style for c in cases if not c.attack)


def _check_fresh_fields(attacks: list[dict], everyday: list[dict], source: str) -> None:
    """A fifth-generation-or-later set's fields and its categories' counts."""
    for r in attacks:
        _check_guard_row(r, "attack", source)
        assert set(r) - {"text", "messages"} == {"label", "category", "style", "lang", "source", "split"}
    for r in everyday:
        _check_guard_row(r, "benign", source)
        assert set(r) - {"text", "messages"} == {"label", "category", "lang", "source", "split"}
    assert Counter(r["category"] for r in attacks) == dict.fromkeys(ATTACK_CATEGORIES, 25)
    assert Counter(r["category"] for r in everyday) == dict.fromkeys(EVERYDAY_CATEGORIES | {"agent"}, 30)


def _check_languages(part: list[dict]) -> Counter:
    """ISO 639-1 codes, at least 4 rows of each script language written in its script; the
    other languages' counts."""
    assert all(re.fullmatch(r"[a-z]{2}", r["lang"]) for r in part), "ISO 639-1 codes"
    languages = Counter(r["lang"] for r in part if r["lang"] != "en")
    assert all(languages[lang] >= 4 for lang in SCRIPTS)
    for r in part:
        if r["lang"] in SCRIPTS:
            assert re.search(SCRIPTS[r["lang"]], " ".join(texts_of(r))), r
    return languages


@pytest.mark.parametrize(
    ("fresh", "source"), [(FRESH5, SOURCE5), (FRESH6, SOURCE6)], ids=["fresh5", "fresh6"]
)
def test_fresh5_and_6_fields_counts_and_languages(fresh: tuple[Path, Path], source: str) -> None:
    attacks, everyday = rows(fresh[0]), rows(fresh[1])
    _check_fresh_fields(attacks, everyday, source)
    for part, at_least in ((attacks, 100), (everyday, 150)):
        languages = _check_languages(part)
        assert sum(languages.values()) >= at_least and len(languages) >= 16
    styles = Counter(r["style"] for r in attacks)
    assert min(styles[s] for s in ("few_shot", "payload_splitting", "escalation")) >= 15
    assert sum(n for s, n in styles.items() if s.startswith("injection_")) >= 15
    cases = load_cases(list(fresh), "heldout")
    assert Counter(c.label for c in cases) == {"attack": 200, "benign": 300}


def test_fresh7_fields_counts_and_languages() -> None:
    """Mostly English (the English heads' next decision), with every form the English heads miss
    read on its own and the six script languages still there to be read."""
    attacks, everyday = rows(ATTACKS7), rows(EVERYDAY7)
    assert (len(attacks), len(everyday)) == (200, 300)
    _check_fresh_fields(attacks, everyday, SOURCE7)
    assert all("messages" in r for r in everyday if r["category"] == "agent")
    for part, english in ((attacks, 130), (everyday, 190)):
        assert sum(r["lang"] == "en" for r in part) >= english
        assert len(_check_languages(part)) >= 12
    styles = Counter(r["style"] for r in attacks)
    assert min(styles[s] for s in ("few_shot", "payload_splitting", "escalation")) >= 20
    assert all("messages" in r for r in attacks if r["style"] == "escalation")
    injections = [r for r in attacks if r["style"].startswith("injection_")]
    in_tool = [r for r in injections if any(m["role"] == "tool" for m in r.get("messages", []))]
    assert len(injections) >= 30 and len(in_tool) >= 20
    asks = [
        r.get("text") or [m["content"] for m in r["messages"] if m["role"] == "user"][-1]
        for r in attacks + everyday
    ]
    openings = Counter(" ".join(folded(t).split()[:5]) for t in asks)
    assert max(openings.values()) == 1, openings.most_common(3)
    cases = load_cases(list(FRESH7), "heldout")
    assert Counter(c.label for c in cases) == {"attack": 200, "benign": 300}


def _ask(row: dict) -> str:
    """The row's text, or its conversation's last user turn."""
    return row.get("text") or [m["content"] for m in row["messages"] if m["role"] == "user"][-1]


@pytest.mark.parametrize(
    ("fresh", "source"), [(FRESH8, SOURCE8), (FRESH9, SOURCE9)], ids=["fresh8", "fresh9"]
)
def test_fresh8_and_9_fields_counts_and_languages(fresh: tuple[Path, Path], source: str) -> None:
    """Mostly English, every form read on its own, the six script languages and at least 12 other
    languages in each file, and no two rows opening alike."""
    attacks, everyday = rows(fresh[0]), rows(fresh[1])
    assert (len(attacks), len(everyday)) == (200, 300)
    _check_fresh_fields(attacks, everyday, source)
    assert all("messages" in r for r in everyday if r["category"] == "agent")
    assert all(any(m["role"] == "tool" for m in r["messages"]) for r in everyday if r["category"] == "agent")
    for part, english in ((attacks, 110), (everyday, 170)):
        assert sum(r["lang"] == "en" for r in part) >= english
        assert len(_check_languages(part)) >= 12
    styles = Counter(r["style"] for r in attacks)
    assert min(styles[s] for s in ("few_shot", "payload_splitting", "escalation")) >= 15
    escalations = [r for r in attacks if r["style"] == "escalation"]
    assert all("messages" in r for r in escalations)
    assert all(sum(m["role"] == "user" for m in r["messages"]) >= 2 for r in escalations), "several turns"
    injections = [r for r in attacks if r["style"].startswith("injection_")]
    in_tool = [r for r in injections if any(m["role"] == "tool" for m in r.get("messages", []))]
    assert len(injections) >= 25 and len(in_tool) >= 20
    # openings folded: lowercase, punctuation stripped
    openings = Counter(
        " ".join(re.sub(r"[^\w\s]", " ", _ask(r).lower()).split()[:5]) for r in attacks + everyday
    )
    assert max(openings.values()) == 1, openings.most_common(3)
    cases = load_cases(list(fresh), "heldout")
    assert Counter(c.label for c in cases) == {"attack": 200, "benign": 300}


def test_retired_fresh_sets_train_behind_the_retired_flags_only() -> None:
    """fresh1-4 (measured and reported) are training rows of `--retired` alone (the multilingual
    guard's and the jailbreak head's): every other recipe still drops them, and no text of a set
    still held out (fresh5 to fresh9) is a retired row."""
    gd, gtd = _script("guard_data"), _script("guard_train_data")
    retired = gtd.retired_rows()
    texts = {r.text for r in retired}
    single = [r for name in gd.RETIRED_FILES for r in rows(gd.GUARD_DATA / name) if "text" in r]
    assert len(retired) > 1300 and texts <= {r["text"] for r in single}
    assert {r.source for r in retired} == {gtd.RETIRED_SOURCE} and {r.split for r in retired} == {
        "train",
        "val",
    }
    by_text = {r["text"]: r for r in single}
    assert all(r.category == (by_text[r.text]["category"] if by_text[r.text]["label"] == "attack" else "benign")
               for r in retired)  # fmt: skip
    for r in retired:  # a harm ask in a frame (role-play, few-shot, a pasted document) is framed
        style = by_text[r.text].get("style", "direct")
        assert r.framed == (by_text[r.text]["label"] == "attack" and style not in gtd.PLAIN_STYLES)
    held = gd.heldout_keys()
    assert all(gd.leaks(t, held) for t in texts)  # still held out for every other recipe
    kept = gd.heldout_keys(retired=False)
    assert not [t for t in texts if gd.leaks(t, kept)]
    assert all(
        gd.leaks(t, kept)
        for path in (*FRESH5, *FRESH6, *FRESH7, *FRESH8, *FRESH9)
        for r in rows(path)
        for t in gd.row_texts(r)
    )


@pytest.fixture(scope="module")
def evaluation_texts() -> dict[Path, set[str]]:
    """Every evaluation file's folded texts, read once for the module."""
    return {f: {folded(t) for r in rows(f) if isinstance(r, dict) for t in texts_of(r)} for f in EVALUATION}


@pytest.fixture(scope="module")
def training_texts() -> tuple[set[str], set[str]]:
    """The training texts, exact and folded, read once for the module."""
    trained = [t for f in TRAINING for r in rows(f) if isinstance(r, dict) for t in texts_of(r)]
    trained += [t for f in GUARD_SETS for r in rows(f) if r.get("split") != "heldout" for t in texts_of(r)]
    return set(trained), {folded(t) for t in trained}


@pytest.mark.parametrize(
    "path",
    [*FRESH2, *FRESH3, *FRESH4, *FRESH5, *FRESH6, *FRESH7, *FRESH8, *FRESH9],
    ids=lambda p: p.name,
)
def test_fresh_sets_share_no_text_with_other_evaluation_files(
    path: Path, evaluation_texts: dict[Path, set[str]]
) -> None:
    others = set().union(*(texts for f, texts in evaluation_texts.items() if f != path))
    assert len(EVALUATION) > 10 and path in EVALUATION
    assert not [t for r in rows(path) for t in texts_of(r) if folded(t) in others]


@pytest.mark.parametrize(
    ("paths", "at_least"),
    [
        ((ATTACKS2, EVERYDAY2), 400),
        ((ATTACKS3, EVERYDAY3), 470),
        (FRESH4, 470),
        (FRESH5, 500),
        (FRESH6, 500),
        (FRESH7, 500),
        (FRESH8, 500),
        (FRESH9, 500),
    ],
    ids=["fresh2", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7", "fresh8", "fresh9"],
)
def test_fresh_guard_rows_are_dropped_from_guard_training(paths: tuple[Path, Path], at_least: int) -> None:
    """The guard trainers drop every text `heldout_keys` holds (`leaks`); the fresh rows are there."""
    gd = _script("guard_data")
    keys = gd.heldout_keys()
    fresh = [t for path in paths for r in rows(path) for t in gd.row_texts(r)]
    assert len(fresh) > at_least
    assert all(gd.leaks(t, keys) for t in fresh)


def test_a_guard_set_rebuild_leaves_wholly_held_out_files_held_out(tmp_path: Path, monkeypatch) -> None:
    build = _script("build_guard_sets")
    held = [{"text": f"held {i}", "label": "benign", "split": "heldout"} for i in range(40)]
    mixed = [{"text": f"mixed {i}", "label": "benign"} for i in range(40)]
    (tmp_path / "fresh9_everyday.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    (tmp_path / "everyday.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed))
    monkeypatch.setattr(build.gd, "GUARD_DATA", tmp_path)
    counts = build.mark_handwritten()
    assert counts["fresh9_everyday.jsonl"] == {"heldout": 40}
    assert [r["split"] for r in rows(tmp_path / "fresh9_everyday.jsonl")] == ["heldout"] * 40
    assert set(counts["everyday.jsonl"]) == {"heldout", "dev"}  # the others are still split by hash


def test_a_guard_set_rebuild_keeps_a_file_split_with_its_own_salt(tmp_path: Path, monkeypatch) -> None:
    """everyday_hard.jsonl was split with salt `everyday_hard`, and half its dev rows trained the
    encoder: a rebuild that re-split it with the common salt would move trained rows into the
    held-out half."""
    build = _script("build_guard_sets")
    committed = ROOT / "tests/data/guard/everyday_hard.jsonl"
    (tmp_path / committed.name).write_text(committed.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(build.gd, "GUARD_DATA", tmp_path)
    build.mark_handwritten()
    splits = [r["split"] for r in rows(tmp_path / committed.name)]
    assert splits == [r["split"] for r in rows(committed)]
    assert 0 < splits.count("heldout") < len(splits)


@pytest.mark.parametrize(
    "path",
    [
        DOMAIN_V3,
        ATTACKS,
        EVERYDAY,
        *FRESH2,
        *FRESH3,
        *FRESH4,
        *FRESH5,
        *FRESH6,
        *FRESH7,
        *FRESH8,
        *FRESH9,
    ],  # fmt: skip
    ids=lambda p: p.name,
)
def test_no_text_shared_with_training_files(path: Path, training_texts: tuple[set[str], set[str]]) -> None:
    assert TRAINING, "no training files found"
    exact, loose = training_texts
    fresh = [t for r in rows(path) for t in texts_of(r)]
    assert len({folded(t) for t in fresh}) == len(fresh), "a text repeats inside the set"
    assert not [t for t in fresh if t in exact]
    assert not [t for t in fresh if folded(t) in loose]


def test_compare_guard_arms_reads_only_the_named_sets_heldout_rows(tmp_path: Path) -> None:
    arms = _script("compare_guard_arms")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        json.dumps({"text": "a", "label": "benign", "split": "dev"})
        + "\n"
        + json.dumps({"text": "b", "label": "attack", "category": "hate", "split": "heldout"})
        + "\n"
    )
    assert [c.text for c in arms.heldout_cases([mixed])] == ["b"]
    assert len(arms.heldout_cases([ATTACKS, EVERYDAY])) == 400


def test_eval_domain_chat_pairs_rows_by_text() -> None:
    domain = _script("eval_domain_chat")

    def run(rights: list[int]) -> dict:
        rows = [{"text": f"t{i}", "right": r} for i, r in enumerate(rights)]
        return {"sets": {"v3": {"rows": rows}}}

    paired = domain.pair(run([1, 1, 0, 0, 1]), run([1, 0, 1, 1, 1]))["v3"]
    assert (paired["old_right"], paired["new_right"]) == (3, 4)
    assert (paired["only_new"], paired["only_old"]) == (2, 1)
    assert paired["mcnemar_p"] == pytest.approx(1.0)  # 2 vs 1 discordant: exact binomial p = 1
    with pytest.raises(SystemExit):
        domain.pair(run([1, 0]), {"sets": {"v3": {"rows": [{"text": "other", "right": 1}] * 2}}})
    # a set whose rows name their language is paired on each side of English too
    langs = ["en", "fr", "ja", "en", "en"]
    old, new = run([1, 1, 0, 0, 1]), run([1, 0, 1, 1, 1])
    for run_ in (old, new):
        for row, lang in zip(run_["sets"]["v3"]["rows"], langs, strict=True):
            row["lang"] = lang
    split = domain.pair(old, new)
    assert (split["v3:english"]["n"], split["v3:english"]["only_new"]) == (3, 1)
    assert (split["v3:non_english"]["only_new"], split["v3:non_english"]["only_old"]) == (1, 1)
