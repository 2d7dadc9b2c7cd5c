"""User feedback on the previous answer: is the last user turn `satisfied`, `wrong_answer`,
`need_clarification` or `want_different` (the reference router's four labels), or none of
them (an ordinary new request)?

Rules, not a learned head: feedback is short and formulaic ("thanks!", "that's wrong", "what
do you mean?", "try again, shorter"), its tells are words a sentence vector blurs with the
topic they are about, and a miss costs a routing choice, not safety. A turn is judged only
when an assistant answer precedes it: "can you explain photosynthesis" opening a
conversation is a request, the same words after an answer are not. The first label whose
patterns match wins, in the order below (a correction that also thanks is a correction).
docs/model-cards/user-feedback.md has the measured figures.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

FeedbackLabel = Literal["wrong_answer", "need_clarification", "want_different", "satisfied"]
FEEDBACK_LABELS: tuple[str, ...] = get_args(FeedbackLabel)
MAX_CHARS = 400  # feedback is a short turn; a long one is a new request that may quote old text

_PATTERNS: dict[str, re.Pattern[str]] = {
    "wrong_answer": re.compile(
        r"\b(that'?s|that is|this is|it'?s|it is|you'?re|you are|your answer is|the answer is)\s+(completely |totally |just |"
        r"still |simply )?(wrong|incorrect|not (right|correct|true|accurate)|false|inaccurate|a mistake)\b|"
        r"\b(wrong|incorrect) (answer|result|number|date|calculation)\b|\byou (made|have) (a |an )?(mistake|"
        r"error|typo)|\b(doesn'?t|does not|didn'?t|did not|won'?t) (work|compile|run)\b|\bthat'?s not what\b.*"
        r"\b(said|happened)\b|\bno,? (it|that) (is|was)n'?t\b|\b(nope|not true)\b|\berror in (step|line|"
        r"your)\b|\byou('?re| are) (mistaken|hallucinating)\b",
        re.IGNORECASE,
    ),
    "need_clarification": re.compile(
        r"\b(i )?(don'?t|do not|still don'?t) (understand|get (it|that|this))\b|\bwhat do you mean\b|"
        r"\b(can|could|would) you (explain|clarify|elaborate( on)?|expand on) (that|this|it|what you|the last|"
        r"your)\b|\b(i'?m|i am) (confused|lost)\b|\bnot (clear|sure what you mean)\b|\bunclear\b|"
        r"\bwhat does (that|this|it) mean\b|\bin (simpler|plain) (terms|words|english)\b|\bexplain (that|it) "
        r"(again|differently|more simply)\b|\bmeaning\?$|^(huh|what)\?*$",
        re.IGNORECASE,
    ),
    "want_different": re.compile(
        r"\b(try|do it|say it|write it) again\b|\b(something|someone|somewhere) else\b|\banother (one|option|"
        r"way|example|version|answer|approach|suggestion)\b|\b(a |something )?different (one|answer|approach|"
        r"style|tone|example|option)\b|\b(make|keep) it (shorter|longer|simpler|more formal|less formal|"
        r"funnier|more concise)\b|\b(shorter|longer|simpler|more detailed),? please\b|^(shorter|longer|"
        r"simpler|again|redo|retry)\b|\brephrase (that|it)\b|\bnot what i (wanted|asked for|meant|was "
        r"looking for)\b|\binstead\b.{0,30}\?|\bgive me (other|more) (options|ideas|examples)\b|\bredo\b",
        re.IGNORECASE,
    ),
    "satisfied": re.compile(
        r"^\W*(thanks?|thank you|thx|ty|cheers|great|perfect|awesome|excellent|nice|cool|brilliant|"
        r"wonderful|amazing|got it|makes sense|that works|that helps|that helped|exactly|lovely|"
        r"much appreciated)\b|\b(thank you|thanks) (so much|a lot|very much)\b|\bthat (worked|works|helped|"
        r"fixed it|did it|solved it)\b|\bexactly what i (needed|wanted|was looking for)\b|\b(this|that) is "
        r"(perfect|great|helpful|exactly right)\b|👍|🙏",
        re.IGNORECASE,
    ),
}


def detect_feedback(text: str, follows_answer: bool) -> tuple[str | None, float]:
    """(label, confidence): the feedback a user turn gives on the previous answer, or (None, 0)
    for a new request. `follows_answer`: an assistant message precedes the turn."""
    sample = text.strip()
    if not follows_answer or not sample or len(sample) > MAX_CHARS:
        return None, 0.0
    for label in FEEDBACK_LABELS:
        if _PATTERNS[label].search(sample):
            # A short turn is all feedback; a longer one may carry a new request beside it.
            return label, 0.95 if len(sample) <= 120 else 0.75
    return None, 0.0
