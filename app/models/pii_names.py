"""PII rules for who someone is: names after a cue ("my name is"), and the post-filter that
drops what spaCy's small NER over-reports (tech terms, imperatives, code).

Pure regex / arithmetic, no model and no I/O (see app/models/pii_rules.py).
"""

from __future__ import annotations

import re

from app.models.pii_dates import ner_date_ok
from app.models.pii_proposals import (
    UPPER,
    EntityProposal,
    wordset,
)

# --------------------------------------------------------------------------- names and places

_NAME_WORD = "[" + UPPER + "]" + r"[\w'’-]+"
_NAME = _NAME_WORD + r"(?:[ \t]+(?:" + _NAME_WORD + r"|[A-Z]\.?(?=[ \t])))*"
# The label of the answering turn in a transcript: "What's your name? User: Ines Duarte"
_ANSWER_LABEL = r"(?:[ \t]*(?:user|customer|client|caller|me|answer|a)[ \t]*:)?"
_SPEECH = r"(?i:said|says|shouted|yelled|whispered|replied|exclaimed|muttered)"
_PERSON_CUES = (
    # "my name is Ana Smith", "Name: John A. Doe", "she named him Scott". Only the cue ignores case.
    re.compile(
        r"\b(?i:my\s+name\s+is|my\s+name's|name\s*:|i\s+am\s+called|(?:he|she|they)\s+(?:is|are|was)\s+called|"
        # "was called Rebecca Contreras", "last name? Chouno", "the name on the account? Matej"
        r"(?:was|were)\s+called|(?:first|last|full|middle|maiden|sur)\s*name(?:\s+is|\s*[?:])|"
        # "her name is Ines", "under my partner's name Reece Ellis", "What's your name? Ines"
        r"(?:(?:his|her|their)|(?:my|your|our|his|her|their)\s+[\w-]+['’]s)\s+name(?:\s+is)?|"
        r"what(?:['’]s|\s+is)\s+(?:your|the|his|her|their)\s+name\s*\?" + _ANSWER_LABEL + "|"
        # "the name on the account? Matej", "... on the card? User: Matej Novak"
        r"(?:billing|shipping|mailing|delivery)\s+address\s*:|name\s+on\s+the\s+\w+\W{0,12}"
        + _ANSWER_LABEL
        + "|"
        r"named(?:\s+(?:him|her|them|it))?|call\s+me)[ \t]+(" + _NAME + r")"
    ),
    # "Mr. John Smith", "Dr Chen": the title is not part of the name
    re.compile(r"\b(?i:Mr|Mrs|Ms|Miss|Mx|Dr|Prof)\.?[ \t]+(" + _NAME + r")"),
    # '"I'm so jealous!" said Nicanor', "shouted at Valerie": a speaker, private or fictional
    # ... and credits: "Directed By:    Raina Ogasahara", "starring Lind"
    re.compile(
        r"\b(?:" + _SPEECH + r"(?:\s+(?i:at|to))?|(?i:(?:directed|written|produced|composed|"
        r"painted|performed)\s+by|starring)[ \t]*:?)[ \t]+(" + _NAME + r")"
    ),
    # ... and the addressee: '"I'm so jealous!" said Nicanor to Holly'
    re.compile(r"\b" + _SPEECH + r"[ \t]+" + _NAME + r"[ \t]+(?i:at|to)[ \t]+(" + _NAME + r")"),
)
_CUE_SOURCES = ("rule:person_cue", "rule:person_title", "rule:person_speech", "rule:person_speech")
# Users who never capitalise: "my name is john smith"
_LOWER_NAME_CUE = re.compile(r"\bmy\s+name\s+is\s+([a-z][\w'’-]+(?:[ \t]+[a-z][\w'’-]+)?)")
_NOT_A_NAME = wordset(
    "not the a an and but so just still also really very called from in at on here there back now this that "
    "user bot agent customer assistant "
    "too going trying unknown irrelevant private secret hidden nothing i im is was"
)


def find_person_cues(text: str) -> list[EntityProposal]:
    """Names after an explicit cue. spaCy's small model misses many non-English names; a cue like
    "my name is" is how users actually disclose them."""
    out = []
    for rx in (*_PERSON_CUES, _LOWER_NAME_CUE):
        for m in rx.finditer(text):
            words = m.group(1).split()[:4]
            while words and words[-1].lower().rstrip(".") in _NOT_A_NAME:
                words.pop()
            if not words or words[0].lower() in _NOT_A_NAME:
                continue
            # words are separated by single spaces/tabs in the text, so the span is recoverable
            end = m.start(1) + len(words[0])
            for w in words[1:]:
                end = text.index(w, end) + len(w)
            score = 0.7 if rx is _LOWER_NAME_CUE else 0.85
            # a titled name may be a public figure or a vignette's party (see pii_register)
            source = _CUE_SOURCES[_PERSON_CUES.index(rx)] if rx in _PERSON_CUES else "rule:person_cue"
            out.append(EntityProposal("PERSON", m.start(1), end, score, source))
    return out


# --------------------------------------------------------------------------- NER post-filter

# Acronyms of PII *kinds*, units and tech terms that spaCy's small model tags as ORG/PERSON/GPE
# ("my SSN is ...", "32 MB of cache", "the SAT").
_NOT_NAMES = wordset(
    """ssn ssns iban ip dob zip pin cvv cvc url email e-mail id api json sql http https atm iso utc gmt
    bic swift ein itin dl tel fax sms otp ok faq pdf csv usb cpu gpu ram ssd hdd os ui ux cli sdk ide
    kb mb gb tb pb kib mib gib tib ghz mhz khz hz kg km cm mm ms ns mph rpm dpi fps sat act gpa gre gmat
    toefl ielts lol omg btw fyi asap eta tbd tba ai ml llm nlp gpt ean upc gtin isbn sku imei vin"""
)
# Software, languages and platforms: spaCy's small model calls them PERSON ("Git", "Ubuntu"), ORG
# ("Kubernetes") or GPE ("Linux", "Python"), and they fill LLM prompts. Companies are not listed:
# "I work at Google" is an employer, which is what ORGANIZATION is for.
TECH_TERMS = wordset(
    """python java javascript typescript kotlin swift rust golang c++ c# ruby perl php scala haskell elixir
    erlang clojure lua matlab julia fortran cobol mysql postgresql postgres sqlite mongodb redis kafka
    spark hadoop elasticsearch kubernetes k8s docker helm terraform ansible jenkins git github gitlab
    bitbucket linux ubuntu debian fedora centos windows macos ios android chrome chromium firefox safari
    excel powerpoint outlook kindle dropbox slack jira confluence notion figma photoshop react angular vue
    svelte django flask fastapi rails node nodejs npm yarn pip conda numpy pandas pytorch tensorflow keras
    scikit-learn jupyter vscode vim emacs bash zsh powershell html css yaml xml markdown latex graphql grpc
    tcp udp dns ssh ssl tls aws azure gcp nginx chatgpt gpt-4 claude gemini llama bert wordpress shopify
    unity unreal blender arduino raspberry earth moon mars jupiter saturn venus mercury
    select from where limit join inner outer group order having union values insert update delete create
    drop alter index null distinct count"""
)
# Prompts open with imperatives that the NER, seeing a capital letter, takes for a name.
IMPERATIVES = wordset(
    """ignore revert solve unzip zip write explain translate summarize summarise list create make give tell
    show find fix convert calculate compute generate describe compare draft rewrite edit check run install
    update delete remove add open close save print read debug refactor implement build deploy merge rebase
    commit push pull clone plot sort parse format optimize optimise simplify evaluate define outline suggest
    recommend imagine pretend act help answer continue proofread paraphrase classify extract rank rate
    review analyze analyse test verify validate"""
)
_VERSIONISH = re.compile(r"v?\d+(?:\.\d+)+")
# "Node.js", "np.sqrt(x)", "os.path": code identifiers, not names.
_CODEISH = re.compile(r"[()\[\]{}=*<>|\\;`$^]|\b\w+\.[a-z_]\w*\b|\w_\w")


def keep_ner_entity(label: str, value: str, text: str = "", start: int = 0) -> bool:
    """Drop spaCy entities that are obviously not names of people/places/organisations.

    ``text``/``start`` locate the entity so a sentence-initial imperative ("Revert this commit")
    can be told from a name.
    """
    stripped = value.strip().strip("¿¡\"'“”‘’")
    if not stripped or not any(ch.isalpha() for ch in stripped):
        return False
    if "\n" in stripped:  # spans across lines are address/signature fragments glued together
        return False
    if label == "DATE_TIME":
        return ner_date_ok(stripped)
    lower = stripped.lower()
    if lower in _NOT_NAMES or lower in TECH_TERMS or "@" in stripped or "://" in stripped:
        return False
    toks = lower.split()
    if all(tok in TECH_TERMS or tok in _NOT_NAMES for tok in toks):
        return False
    if stripped.islower() and toks[0] in TECH_TERMS:  # "git cherry-pick", "docker compose"
        return False
    if _CODEISH.search(stripped) or any(_VERSIONISH.fullmatch(tok) for tok in stripped.split()):
        return False
    tokens = stripped.split()
    if tokens[0].lower() in IMPERATIVES and _sentence_initial(text, start):
        return False
    # In normally cased text a lower-case "name" is a word ("git cherry-pick"); users who never
    # capitalise ("my name is john smith") keep their entities, and nationalities are often typed
    # lower-case ("great norwegian food").
    if stripped.islower() and (len(stripped) <= 3 or (label != "NRP" and any(ch.isupper() for ch in text))):
        return False
    if label == "PERSON" and not _person_shaped(stripped):
        return False
    has_digit = any(ch.isdigit() for ch in stripped)
    if label in ("PERSON", "GPE", "NRP") and has_digit:
        return False
    # "Q4", "F1", "A3": short letter+digit codes are never organisations worth flagging
    return not (has_digit and len(stripped) <= 3)


# "Salesperson of the Month", "the Chairperson": a job noun, not a name.
_ROLE_NOUN = re.compile(r"\w+(?:person|persons|people)", re.IGNORECASE)


def _person_shaped(value: str) -> bool:
    """A name starts with a letter and has two of them: "~D" and "A ⊃ B" in a logic exercise
    are symbols the NER took for initials."""
    letters = sum(ch.isalpha() for ch in value)
    return value[0].isalpha() and letters >= 2 and not _ROLE_NOUN.fullmatch(value)


def _sentence_initial(text: str, start: int) -> bool:
    head = text[:start].rstrip(" \t\"'“‘(*-")
    return not head or head[-1] in ".!?:;\n"
