"""PII rule for names in the places everyday messages put them: salutations ("Dear Anna,"),
direct address opening a message ("Anna, this is an update about ..."), sign-offs ("Thanks,
Anna" / "Best regards,\\nAnna"), @-mentions, transcript speaker labels, a name before a verb
only people do ("Anna lives on ..."), and a name line heading a contact block.

The position, not the word, is the evidence: spaCy's small model misses uncommon and
username-like names there ("Olufemi", "xX_darkwolf99"), so cased words and handles in these
slots count; the words that commonly fill the same slot ("Hi all,", "However, this is") do not.

Pure regex, no model and no I/O (see app/models/pii_rules.py).
"""

from __future__ import annotations

import re

from app.models.pii_names import IMPERATIVES, TECH_TERMS
from app.models.pii_proposals import UPPER, EntityProposal, wordset

_CASED = "[" + UPPER + r"][\w'’-]*"
# A handle: letters plus digits/underscores/dots ("j0hnny_b", "mike.t", "xX_darkwolf99").
_HANDLE = r"(?=[\w.-]*[\d_])[A-Za-z][\w.-]*[A-Za-z0-9]"
_NAME = (
    r"(?:" + _HANDLE + r"|" + _CASED + r"(?:[ \t]+(?:" + _CASED + r"|[A-Z]\.))?(?:[ \t]+" + _CASED + r")?)"
)
_LOWER = r"[a-z][a-z'-]{1,20}"
# In a text typed all in lower case: up to three words, any letters ("olli-pekka m. pusa").
_ANY_WORD = r"[^\W\d_][\w'’-]*"
_LOWER_NAME = _ANY_WORD + r"(?:[ \t]+(?:" + _ANY_WORD + r"|[^\W\d_]\.)){0,2}"

# Words that fill a name's slot without being a name: "Hi all,", "Dear Sir,", "However, this is".
_SLOT_WORDS = wordset(
    """there all everyone everybody team guys folks friends friend sir sirs madam mam maam ma'am again
    both you y'all yall mate buddy world chatgpt assistant claude gpt bot ai customer customers
    colleagues colleague hiring manager admin support community people ladies gentlemen dear sweetie
    honey love babe darling bro dude man boss doc doctor professor teacher mom mum dad son class students
    reader readers user users valued members member neighbours neighbors committee board partners parents
    family morning evening afternoon night thanks thank please sorry yes no ok okay well so now also
    however but and then first second third finally today tomorrow yesterday tonight unfortunately
    fortunately actually anyway honestly basically meanwhile additionally furthermore moreover therefore
    thus hence still besides otherwise instead sure great good perfect right note update reminder
    important urgent warning attention question answer hint tip example summary context background result
    results step steps problem solution task goal input output edit ps fyi btw regards best cheers
    sincerely yours here this that these those it its i we they he she what why how when where who which
    if in on at for with as after before since because although though while unless until given suppose
    assume consider imagine recall remember listen look wait hey hi hello oh ah um wow alright yeah yep
    nope nah hmm lol ugh sadly luckily interestingly surprisingly ideally personally frankly clearly
    obviously similarly likewise again lastly next later earlier once overall originally currently
    recently usually generally typically normally alternatively specifically essentially otherwise
    monday tuesday wednesday thursday friday saturday sunday january february march april may june july
    august september october november december sir/madam whom whoever whatever everyone's team's
    dear/all all/ folks/ guys/ hi/ anyone someone somebody anybody nobody none sorted noted agreed confirmed updated fixed done
    understood received approved awesome cool nice lovely brilliant excellent fine to from the a an of or my
    our your his her their mr mrs ms dr bye goodbye seriously literally totally definitely absolutely
    anyways sigh oops huh dang damn darn yikes whoa meh aw gosh jeez geez ouch phew yay exactly indeed
    true welp ahem nevermind np tysm"""
)
_GREETING = r"(?i:dear|hi|hello|hey|hiya|heya|howdy|greetings|yo|good\s+(?:morning|afternoon|evening|day))"
_SALUTATION = re.compile(
    r"(?:^|(?<=[\n.!?]))[ \t]*" + _GREETING + r"[ \t]+(" + _NAME + r"|" + _LOWER + r")(?=[ \t]*(?:[,!:\n]|$))"
)
# "Anna, this is ...": a name opening a line, a comma, then words that address the reader.
_ADDRESSEE = (
    r")[ \t]*(?:,|[-–—])[ \t]+(?=(?i:this|just|quick|here|please|can|could|would|"
    r"will|i|i'm|i’m|i've|i'll|we|we're|we'll|thanks|thank|hope|hoping|sorry|your|you|you're|you've|"
    r"you'll|remember|don't|regarding|about|reminder|it's|my|our|are\s+you|did\s+you|have\s+you|do\s+you|"
    r"let's|let\s+me|good\s+news|fyi|btw)\b)"
)
_ADDRESSED = re.compile(r"(?m)^[ \t]*(" + _NAME + _ADDRESSEE)
_SIGN_OFF = (
    r"(?i:thanks|thank\s+you|thx|many\s+thanks|cheers|best|best\s+wishes|best\s+regards|kind\s+regards|"
    r"warm\s+regards|warmly|regards|sincerely|yours(?:\s+(?:truly|sincerely|faithfully))?|all\s+the\s+best|"
    r"take\s+care|love|xoxo|talk\s+soon|see\s+you(?:\s+soon)?|speak\s+soon|with\s+thanks|respectfully|hugs)"
)
# The sign-off starts a line or follows a sentence; the name ends its line.
_SIGNED = re.compile(
    r"(?m)(?:^|(?<=[.!?])[ \t]+)[ \t]*"
    + _SIGN_OFF
    + r"[ \t]*[,.!]?[ \t]*(?:\n[ \t]*)?(?:[-–—~][ \t]*)?("
    + _NAME
    + r")[ \t]*[.!]?[ \t]*$"
)
# "... sorry. - Anna" at the very end of a message (not a bullet: a sentence ends before the dash).
_DASH_SIGNED = re.compile(r"[.!?][ \t]+[-–—~][ \t]*(" + _NAME + r")[ \t]*$")
# The same slots in a text typed all in lower case ("thanks,\nangel", "teodor, this is ..."):
# a comma or line break must part a sign-off from the name ("love pizza" is no sign-off), and
# only one word opens a line.
_LOWER_SLOTS = (
    re.compile(
        r"(?:^|(?<=[\n.!?]))[ \t]*" + _GREETING + r"[ \t]+(" + _LOWER_NAME + r")(?=[ \t]*(?:[,!:\n]|$))"
    ),
    re.compile(r"(?m)^[ \t]*(" + _ANY_WORD + _ADDRESSEE),
    re.compile(
        r"(?m)(?:^|(?<=[.!?])[ \t]+)[ \t]*"
        + _SIGN_OFF
        + r"[ \t]*(?:[,.!][ \t]*\n?|\n)[ \t]*(?:[-–—~][ \t]*)?("
        + _LOWER_NAME
        + r")[ \t]*[.!]?[ \t]*$"
    ),
    re.compile(r"[.!?][ \t]+[-–—~][ \t]*(" + _LOWER_NAME + r")[ \t]*$"),
)
# "@dave thanks": a mention, not an e-mail (nothing before the @) nor a decorator (followed by text).
_MENTION = re.compile(r"(?<![\w@.])@([A-Za-z][\w.]{1,29}[A-Za-z0-9])(?=[ \t]*[,:]?[ \t]+[a-z])")
_DECORATORS = wordset(
    "property staticmethod classmethod dataclass override abstractmethod param return returns"
)
# A transcript's speaker label ("Lindsey: Remember me?", "Cosette: \"Who are you?\""): a name
# opening a line, a colon, then speech; not a form label ("Phone:", "Note:").
_SPEAKER = re.compile(
    r"(?m)^[ \t>]*("
    + _CASED
    + r"(?:[ \t]+"
    + _CASED
    + r")?)[ \t]*:[ \t]*(?=[\"“'‘]|[A-Z][^\n]*[?!.\"”]\s*(?:$|\n))"
)
_LABELS = wordset(
    "phone email e-mail website web personal info address name note notes answer question user bot assistant "
    "system human ai q a step example input output title date time subject from to cc re summary warning "
    "error tip hint solution result results explanation translation source reference tel fax mobile "
    "company organization organisation occupation job role location city country state zip status "
    "update reason description comment comments response reply prompt instruction instructions task "
    "context problem premise conclusion hypothesis option choice correct incorrect true false yes no"
)
# "Alessandro lives on ...", "Hafþór shouted at ...": verbs that only people do, after a name
# opening a sentence.
_PERSON_VERB = re.compile(
    r"(?:^|(?<=[.!?\n])[ \t]*)("
    + _CASED
    + r"(?:[ \t]+"
    + _CASED
    + r")?)[ \t]+(?:lives|lived|shouted|whispered|"
    r"married|grew\s+up|was\s+born|texted|had\s+given)\b"
)
# "Kacper's address", "Anna's husband": a possessive of something only a person has.
_PERSON_OWNS = re.compile(
    r"(?<![\w'’])("
    + _CASED
    + r"(?:[ \t]+"
    + _CASED
    + r")?)['’]s[ \t]+(?:home\s+)?(?:address|phone|number|e-?mail|"
    r"birthday|mother|father|mum|mom|dad|wife|husband|daughter|son|sister|brother|girlfriend|boyfriend|"
    r"partner|parents|kids?|child|children|baby|grand(?:son|daughter|children|mother|father)|niece|nephew|"
    r"cousin|aunt|uncle|fianc[eé]e?|widow|widower)\b"
)
_CASED_NAME = _CASED + r"(?:[ \t]+(?:" + _CASED + r"|[A-Z]\.))?(?:[ \t]+" + _CASED + r")?"
# "my kid Signe", "our neighbour Gregor Lindqvist": a relative or acquaintance, then the name.
_RELATIVE_NAMED = re.compile(
    r"\b(?i:my|our)[ \t]+(?i:kid|son|daughter|child|baby|wife|husband|partner|friend|neighbou?r|boss|"
    r"colleague|co-?worker|brother|sister|mother|father|mom|mum|dad|aunt|uncle|cousin|niece|nephew|"
    r"grand(?:son|daughter|ma|mother|pa|father)|step(?:son|daughter|mother|father)|landlord|landlady|tenant|"
    r"room-?mate|flatmate|girlfriend|boyfriend|fianc[eé]e?|manager|classmate|teammate|ex)[ \t]+("
    + _CASED_NAME
    + r")"
)
# "add Mikolaj G Walczak as a beneficiary": a role in someone's affairs only a person takes.
_PERSON_ROLE = re.compile(
    r"(" + _CASED_NAME + r")[ \t]+as[ \t]+(?:(?:a|an|the|my|our|his|her|their)[ \t]+)?(?i:beneficiary|"
    r"guardian|executor|executrix|trustee|co-?signer|authori[sz]ed\s+user|emergency\s+contact|next\s+of\s+kin|"
    r"dependa?e?nt|joint\s+(?:account\s+)?holder|godparent|godmother|godfather|caregiver|carer)\b"
)
# "had given Teresa his address", "tell Ola her results": someone with a his/her, after a verb of giving.
_GIVEN_TO = re.compile(
    r"\b(?i:gave|given|give|gives|told|tell|tells|sent|send|sends|showed|show|shows|handed|hand|hands|lent|"
    r"lend|texted|emailed|asked|ask|asks|owe|owes|owed|promised|offered)[ \t]+("
    + _CASED_NAME
    + r")[ \t]+(?:his|her)\b"
)
# A name alone on the first line of a contact block ("Martin Rasmussen\nAcme Ltd\n407 Main St").
_LINE = re.compile(r"(?m)^[ \t>]*(.*)$")
_TITLE_CASED = "[" + UPPER + r"][a-zß-ÿ][\w'’-]*"  # "Anna", not a heading in capitals
_FULL_NAME = re.compile(_TITLE_CASED + r"(?:[ \t]+(?:[A-Z]\.?|" + _TITLE_CASED + r")){1,3}")
_CONTACT_LINE = re.compile(r"\d{3}|@|\b(?i:phone|e-?mail|tel|mobile|address)\b")
_NOT_PERSON_WORDS = wordset(
    "office street st road rd avenue ave apt suite inc ltd llc corp company co bank hotel university school "
    "department dept team group services service center centre hospital clinic store shop the dear hi hello "
    "corporation capital electric gas plc limited holdings fund trust industries partners associates "
    "personal info united states kingdom republic law act decree"
)


def _is_slot_word(name: str, strict: bool = False) -> bool:
    """``strict`` also rejects imperatives and tech terms ("Python, this is"): only where a line
    opens, since after "Hi"/"Thanks" they are names as often ("Julia", "Ruby")."""
    words = name.lower().replace("’", "'").split()
    return any(w in _SLOT_WORDS or (strict and (w in IMPERATIVES or w in TECH_TERMS)) for w in words)


def _trim(text: str, start: int, end: int) -> int:
    """End of the name once a trailing slot word ("Anna Thanks") is dropped."""
    value = text[start:end]
    words = value.split()
    while len(words) > 1 and _is_slot_word(words[-1]):
        words.pop()
    return start + value.index(words[-1], len(" ".join(words[:-1]))) + len(words[-1])


def find_greeting_names(text: str) -> list[EntityProposal]:
    """PERSON from salutations, direct address, sign-offs, mentions, speaker labels, person-only
    verbs and contact-block name lines."""
    return _greeting_slots(text) + _mentions(text) + _speakers_and_doers(text) + _name_line(text)


def _greeting_slots(text: str) -> list[EntityProposal]:
    out: list[EntityProposal] = []
    lower_text = not any(ch.isupper() for ch in text)
    slots = [(_SALUTATION, 0.85), (_ADDRESSED, 0.75), (_SIGNED, 0.85), (_DASH_SIGNED, 0.7)]
    if lower_text:
        slots += list(zip(_LOWER_SLOTS, (0.85, 0.75, 0.85, 0.7), strict=True))
    for rx, score in slots:
        for m in rx.finditer(text):
            start, end = m.span(1)
            end = _trim(text, start, end)
            name = text[start:end]
            first = name.split()[0]
            if _is_slot_word(name if lower_text else first, strict=rx in (_ADDRESSED, _LOWER_SLOTS[1])):
                continue
            s = score
            if name.islower() and not re.search(r"[\d_.]", name):
                # a plain lower-case word is a name only after a greeting, or in all-lower-case text
                if not (rx is _SALUTATION or lower_text):
                    continue
                s = 0.6
            if all((c.start, c.end) != (start, end) for c in out):
                out.append(EntityProposal("PERSON", start, end, s, "rule:greeting"))
    return out


def _mentions(text: str) -> list[EntityProposal]:
    return [
        EntityProposal("PERSON", m.start(1), m.end(1), 0.7, "rule:mention")
        for m in _MENTION.finditer(text)
        if m.group(1).lower() not in _DECORATORS
    ]


def _speakers_and_doers(text: str) -> list[EntityProposal]:
    out: list[EntityProposal] = []
    doers = (_SPEAKER, _PERSON_VERB, _PERSON_OWNS, _RELATIVE_NAMED, _PERSON_ROLE, _GIVEN_TO)
    for rx, score in zip(doers, (0.7, 0.75, 0.75, 0.75, 0.75, 0.7), strict=True):
        matches = list(rx.finditer(text))
        if rx is _SPEAKER and len(matches) < 2:
            # one "Mission Statement: ..." is a heading; a speaker needs a quote or a second speaker
            matches = [m for m in matches if re.match(r"\s*:\s*[\"“'‘]", text[m.end(1) :])]
        for m in matches:
            start, end = m.span(1)
            if rx is _PERSON_ROLE:  # "Add Anna Berg as ...": not the imperative opening the sentence
                start = _skip_leading_slot_words(text, start, end)
            name = text[start:end]
            words = name.lower().split()
            if words and not any(w in _LABELS for w in words) and not _is_slot_word(name, strict=True):
                out.append(EntityProposal("PERSON", start, end, score, "rule:name_position"))
    return out


def _skip_leading_slot_words(text: str, start: int, end: int) -> int:
    """Start of the name once leading slot words and imperatives ("Please Add") are skipped."""
    for word in text[start:end].split()[:-1]:
        if not _is_slot_word(word, strict=True):
            break
        start = text.index(word, start) + len(word)
        start += len(text[start:end]) - len(text[start:end].lstrip())
    return start


def _name_line(text: str) -> list[EntityProposal]:
    """A full name alone on one of the first three lines, with contact data within five lines."""
    out = []
    lines = [m for m in _LINE.finditer(text) if m.group(1).strip()]
    for i, line in enumerate(lines[:3]):
        m = _FULL_NAME.fullmatch(line.group(1).strip())
        if not m or any(w.lower().strip(".") in _NOT_PERSON_WORDS for w in m.group().split()):
            continue
        if _is_slot_word(m.group(), strict=True):
            continue
        if any(_CONTACT_LINE.search(ln.group(1)) for ln in lines[i + 1 : i + 6]):
            start = line.start(1) + line.group(1).index(m.group())
            out.append(EntityProposal("PERSON", start, start + len(m.group()), 0.7, "rule:name_line"))
    return out
