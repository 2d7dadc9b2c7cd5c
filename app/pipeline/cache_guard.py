"""Polarity of a cache query: what keeps "disable 2FA" from being answered with "enable 2FA".

Sentence encoders put a question and its negation close together (MiniLM: cosine > 0.9 for
"how do I enable 2FA" / "how do I disable 2FA"), so no similarity threshold separates them.
`polarity_signature(text)` names the concepts the text negates; the cache phase puts it in
the partition, and since lookups never cross partitions, a query is only ever compared
with stored queries that negate the same things (on every backend, with no extra field).

A concept is a lightly stemmed content word. It is negated by
- a negator before it (`not`, `no`, `never`, `n't`, `without`, `avoid`, `stop`, ...): the
  next content word is negated ("do not use sudo" negates `use`);
- a negating prefix or suffix (`un-`, `dis-`, `non-`, `in-`/`im-`/`il-`/`ir-` on adjectives,
  `-less`): "unsafe" negates `safe`, "harmless" negates `harm`;
- a listed antonym ("deny", "forbidden" negate `allow`; "off" negates `on`).
Negations compose: "not unsafe" negates nothing. So "is it unsafe" and "is it not safe"
share a signature (and may share an answer); "is it safe" has none. The rules are
morphological, not a word list, so they carry to prompts nobody listed; a word they
misread ("install" is not "in-stall", but an unlisted one may be) costs at most a missed
hit between paraphrases that word differently, never a wrong answer.
"""

from __future__ import annotations

import hashlib
import re

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# Negate the next content word.
_NEGATORS = frozenset(
    {
        "not", "no", "never", "without", "none", "nothing", "nobody", "nowhere", "neither", "nor",
        "cannot", "avoid", "avoiding", "prevent", "preventing", "stop", "stopping", "halt", "quit",
        "lack", "lacking", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "cant", "wont",
        "shouldnt", "wouldnt", "couldnt", "havent", "hasnt", "hadnt", "mustnt", "neednt",
    }
)  # fmt: skip
# Skipped when looking for what a negator negates.
_FUNCTION_WORDS = frozenset(
    {
        "a", "an", "the", "to", "be", "is", "are", "am", "was", "were", "been", "being", "do",
        "does", "did", "have", "has", "had", "can", "could", "should", "would", "will", "shall",
        "may", "might", "must", "i", "you", "he", "she", "it", "we", "they", "me", "my", "your",
        "its", "our", "their", "this", "that", "these", "those", "any", "so", "very", "really",
        "too", "at", "all", "ever", "even", "yet", "just", "get", "got", "let", "of", "for",
    }
)  # fmt: skip
# Antonyms without a negating affix: the negative word -> the concept it negates.
_ANTONYMS = {
    "disable": "enable", "deny": "allow", "forbid": "allow", "forbidden": "allow",
    "prohibit": "allow", "ban": "allow", "banned": "allow", "block": "allow", "refuse": "allow",
    "reject": "accept", "exclude": "include", "off": "on", "false": "true", "fail": "succeed",
    "failure": "succeed", "dangerous": "safe", "harmful": "safe", "decrease": "increase",
}  # fmt: skip
# Words that look prefixed but negate nothing ("understand", "units", "discuss", "invest"),
# by how they start: the common families of the English vocabulary such a rule misreads.
_NOT_NEGATING_STARTS = (
    "under", "inter", "intro", "intra", "unit", "univers", "union", "unif", "uniq", "unison",
    "unix", "unicode", "unicef", "unesco", "unicorn", "uncle", "unless", "until", "unanim",
    "dist", "discover", "discuss", "discip", "discharg", "discours", "discret", "disclos",
    "discus", "discount", "discord", "discrete", "displa", "dispatch", "dispos", "dispers",
    "disput", "dissol", "dissert", "dissip", "dissemin", "disease", "disaster", "disgust",
    "disguis", "dish", "dismiss", "dismantl", "disturb", "disrupt", "disk", "disney",
    "disdain", "dismay",
    "instru", "instit", "invest", "infra", "influen", "initi", "inaugur", "incorporat",
    "incent", "incid", "incumb", "install", "inmate", "innat", "intim", "intens", "invent",
    "inclus", "invas", "inspect", "insect", "inspir", "infect", "informa", "invit", "incit",
    "imminen", "immacul", "immigra", "immedia", "immun", "impl", "impress", "import",
    "imperi", "imperat", "impuls", "illustr", "irrita", "irriga", "instant", "infant", "inherent",
    "infiltr", "incred",
)  # fmt: skip
_NOT_NEGATING_LESS = frozenset({"less", "bless", "unless", "regardless", "nevertheless", "nonetheless"})
_NEGATABLE_ENDINGS = (  # adjectives an in-/im-/il-/ir- negates ("invalid", "inaccurate")
    "able", "ible", "ive", "ure", "id", "ect", "ete", "ite", "ous", "ent", "ant", "ate", "ane",
    "ic",
)  # fmt: skip


def polarity_signature(text: str) -> str:
    """Empty when `text` negates nothing, else a short stable hash of the concepts it negates."""
    negated = negated_concepts(text)
    if not negated:
        return ""
    return hashlib.sha256("\n".join(sorted(negated)).encode()).hexdigest()[:12]


def negated_concepts(text: str) -> frozenset[str]:
    """The stemmed concepts `text` negates, after double negations cancel."""
    negated_set: set[str] = set()
    pending = 0  # negators waiting for the content word they negate
    previous = ""
    for word in _words(text):
        if word in _NEGATORS and not (word == "not" and previous == "or"):  # "whether or not"
            pending += 1
        elif word not in _FUNCTION_WORDS:
            concept, negated = _concept(word)
            if (int(negated) + pending) % 2:
                negated_set.add(concept)
            pending = 0
        previous = word
    return frozenset(negated_set)


def _words(text: str) -> list[str]:
    """Lower-case words; a "n't" contraction becomes its verb and "not"."""
    words: list[str] = []
    for word in _WORD.findall(text.lower().replace("\u2019", "'")):
        if word.endswith("n't"):
            words.extend(w for w in (word[:-3], "not") if w)
        else:
            words.append(word.split("'", 1)[0])
    return words


def _concept(word: str) -> tuple[str, bool]:
    """(stemmed concept, whether the word negates it)."""
    stem = _stem(word)
    opposite = _ANTONYMS.get(word) or _ANTONYM_STEMS.get(stem)
    if opposite is not None:
        return _stem(opposite), True
    base = _unaffixed(word)
    if base is None:
        return stem, False
    concept, negated = _concept(base)  # "unblock": un- on a negative word
    return concept, not negated


def _unaffixed(word: str) -> str | None:
    """The word under a negating affix, or None when it carries none."""
    if len(word) < 5 or word.startswith(_NOT_NEGATING_STARTS):
        return None
    if word.endswith("less") and len(word) >= 7 and word not in _NOT_NEGATING_LESS:
        return word[:-4]
    for prefix in ("non", "un", "dis"):
        if word.startswith(prefix) and len(word) - len(prefix) >= 3:
            return word[len(prefix) :]
    if word.startswith(("il", "ir")) and word[2] == word[1]:  # illegal, irrational
        return _adjective(word[2:], also_al=True)
    if word.startswith("im") and word[2] in "mpb":  # impossible, immoral
        return _adjective(word[2:], also_al=True)
    if word.startswith("in") and word[2] not in "gdtn":  # insecure, invalid (not "index", "into")
        return _adjective(word[2:], also_al=False)
    return None


def _adjective(stem: str, *, also_al: bool) -> str | None:
    """`in-`/`im-`/`il-`/`ir-` negate adjectives ("invalid"), not verbs or nouns ("install",
    "investment"); "-al" counts only after il-/im-/ir- ("illegal"; "initial" is no negation)."""
    if len(stem) < 4 or stem.endswith("ment"):
        return None
    return stem if stem.endswith(_NEGATABLE_ENDINGS) or (also_al and stem.endswith("al")) else None


def _stem(word: str) -> str:
    """Just enough stemming that "allowed", "allows" and "allow" are one concept."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


_ANTONYM_STEMS = {_stem(word): concept for word, concept in _ANTONYMS.items()}  # "disabled" too
