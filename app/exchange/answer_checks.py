"""The front door's half of the response-side plugins (`response_jailbreak`, `hallucination`).

Once an answer is whole the exchange asks the Router's `check_answer` (one call per
exchange) and applies the strongest action of the flagged checks:

- `header`: the answer is kept; `x-vsr-response-warnings` names the flagged checks
  (format: AnswerVerdict.warnings_header, e.g. `hallucination;score=0.2140;sentences=2`);
- `annotate`: as `header`, and a visible notice is appended to the answer's text
  (NOTICE below); routing_metadata.response_checks carries the details for JSON answers;
- `block`: the answer is replaced by a 403 security_violation (the request guards' error
  body): code `jailbreak_detected` / `harmful_content_detected` for the
  response guard, `hallucination_detected` for unsupported claims, action_taken `block`.

A stream with checks is held whole (see docs/hallucination.md "Streams"), so every action
is available to it, on both front doors. A check that fails never blocks (fail open).
"""

from __future__ import annotations

import logging
from typing import Any

from app.common.chat_text import content_text
from app.common.errors import SvcError, security_violation
from app.pipeline.answers.policy import Checker
from app.pipeline.answers.schemas import AnswerChecks, AnswerVerdict, CheckName, CheckOutcome

log = logging.getLogger("svc_sr.exchange")

WARNINGS_HEADER = "x-vsr-response-warnings"
BLOCKED_HEADER = "x-vsr-response-blocked"
CONTEXT_ROLES = frozenset({"system", "developer", "tool", "function"})
NOTICE = "[svc-sr notice: {what}]"
WHAT = {
    "response_jailbreak": "this answer was flagged by the response safety check",
    "hallucination": "parts of this answer are not supported by the provided context",
}


async def ask(
    check: Checker, checks: AnswerChecks, body: dict[str, Any], completion: dict[str, Any]
) -> AnswerVerdict:
    """The Router's verdict on `completion` for the request `body`; a failed call is a
    verdict that flags nothing (fail open), each check reporting the error."""
    min_chars = checks.hallucination.min_context_chars if checks.hallucination is not None else 0
    try:
        return await check(checks, answer_text(completion), request_context(body, min_chars))
    except Exception as exc:
        log.exception("answer checks failed")
        names: list[CheckName] = []
        if checks.response_jailbreak is not None:
            names.append("response_jailbreak")
        if checks.hallucination is not None:
            names.append("hallucination")
        error = f"{type(exc).__name__}: {exc}"
        return AnswerVerdict(outcomes=[CheckOutcome(check=n, error=error) for n in names])


def request_context(body: dict[str, Any], min_user_chars: int) -> list[str]:
    """The context a request supplied: system/developer/tool messages, and user messages of
    at least `min_user_chars` (retrieved passages pasted into the prompt)."""
    texts = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        text = content_text(message.get("content"))
        role = message.get("role")
        if text.strip() and (role in CONTEXT_ROLES or (role == "user" and len(text) >= min_user_chars)):
            texts.append(text)
    return texts


def answer_text(completion: dict[str, Any]) -> str:
    choices = completion.get("choices") or []
    parts = [content_text((c.get("message") or {}).get("content")) for c in choices if isinstance(c, dict)]
    return "\n".join(p for p in parts if p)


def notice(verdict: AnswerVerdict) -> str:
    return NOTICE.format(what="; ".join(WHAT[o.check] for o in verdict.flagged))


def annotate(completion: dict[str, Any], verdict: AnswerVerdict) -> None:
    """Append the notice to each choice's text (a blank line apart)."""
    text = notice(verdict)
    for choice in completion.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            message["content"] = f"{message['content']}\n\n{text}" if message["content"] else text


def blocked(verdict: AnswerVerdict) -> SvcError:
    """The 403 of a blocked answer: the blocking check's code and what it found."""
    outcome = next(o for o in verdict.flagged if o.action == "block")
    if outcome.check == "hallucination":
        found = [f"unsupported_sentences:{len(outcome.detail.get('unsupported') or [])}"]
        code = "hallucination_detected"
        what = "claims the provided context does not support"
    else:
        found = [str(t) for t in outcome.detail.get("types") or []]
        by = outcome.detail.get("flagged_by") or []
        code = "jailbreak_detected" if "jailbreak" in by or not by else "harmful_content_detected"
        what = "unsafe content"
    return security_violation(code, found, message=f"response blocked: the answer contained {what}")


def warning_headers(verdict: AnswerVerdict) -> dict[str, str]:
    headers = {WARNINGS_HEADER: verdict.warnings_header()} if verdict.flagged else {}
    if verdict.action == "block":
        headers[BLOCKED_HEADER] = "true"
    return headers
