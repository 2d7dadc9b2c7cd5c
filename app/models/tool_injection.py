"""Instructions planted for the AI in a tool result (an e-mail, a web page, a calendar entry, a
file an agent read): text that *addresses the AI reader* and, close by, asks for what the user
did not (send, pay, delete, run, reveal, tell the user X, keep it quiet). The human never wrote
it, and an ordinary document does not talk to the assistant that reads it, so the two cues
together are an injection wherever the jailbreak head's score lands.

Why a rule beside the head: the head is trained on prompts people type; on the tuning material
(the hand-written dev rows, the retired fresh sets and fresh5: docs/security.md, "Instructions
planted in tool results") it scored 11 of 52 attacks planted in tool results at its cut. Both cues are required: a
repository's AGENTS.md ("AI agents: run make lint before committing") addresses the AI without a
risk cue, and a phishing e-mail ("transfer the money today") carries a risk cue without the
address. Only `tool_results` parts are read with it (app/pipeline/signals/guarded.py): a user
talking to the assistant addresses it all the time.

Scope: English, with the address in a few other languages (German, French, Spanish, Portuguese,
Italian, Russian, Ukrainian, Chinese, Japanese, Korean, Hindi) and the risk cues that need no
words (a shell pipe to the network, a key file, an account number, a wallet address).
"""

from __future__ import annotations

import re

_I = re.IGNORECASE

_READER = r"(?:ai|a\.i\.|llm|gpt|language model|chatbot|copilot)"
_ROLE = r"(?:assistants?|agents?|models?|bots?)"
# Ways text addresses the AI that reads it.
ADDRESS = re.compile(
    "|".join(
        (
            # "Dear AI agent", "Hey assistant", "Note for the AI", "SYSTEM NOTICE TO MODEL", "@assistant"
            rf"(?:\bdear|\bhey|\bhi|\bhello|\battention|\bnotes?|\bnotice|\bmessage|\binstructions?|\bdirectives?|"
            rf"\breminder|\bwarning|\bmemo)\s*(?:(?:to|for)\s+)?(?:the\s+|all\s+|any\s+|every\s+)?"
            rf"(?:{_READER}\s*{_ROLE}?|assistants?|models?|agents?)\b",
            rf"@(?:{_READER}|assistant|agent|bot)\b",
            # "AI agents:", "AI assistant,", "LLM:"
            rf"\b{_READER}(?:\s+{_ROLE})?\s*[:,]",
            # "[assistant-directive]", "[ASSISTANT-ONLY NOTICE]", "<agent_instruction>"
            r"\b(?:assistant|agent|ai|model)[-_ ](?:only|directive|instructions?|override|notice|note|command)s?\b",
            # "<<assistant: ...", "|| assistant: ..." (not a transcript's line-initial "Assistant:")
            r"(?:<<|\|\||\[|\{|<!--|>)\s*(?:assistant|ai|agent|system)\s*:",
            # "Assistant, this is IT." at a sentence's or a field's start ("Body: Assistant, ...")
            r"(?:^|[.!?:>\]\n]\s*)(?:ai\s+)?assistant\s*,\s",
            # "AI agents must ...", "To any AI reading this page", "AI assistant processing this mailbox"
            rf"\b{_READER}\s+{_ROLE}\s+(?:must|should|shall|need to|are required to)\b",
            rf"\bto\s+(?:any|all|every|the)\s+{_READER}\b",
            rf"\b{_READER}(?:\s+{_ROLE})?\s+(?:reading|processing|summari[sz]ing|handling|parsing)\s+this\b",
            # "The assistant must now ...", "if you are an AI"
            rf"\bthe\s+(?:{_READER}\s+)?(?:assistant|agent|model)\s+(?:must|should|shall|is\s+(?:now\s+)?(?:required|authori[sz]ed|allowed|permitted))\b",
            rf"\bif\s+you\s+are\s+an?\s+(?:{_READER}|assistant|agent|bot)\b",
            # other languages: "Hinweis an den Assistenten", "instruction pour l'assistant IA",
            # "nota para el asistente", "вказівка для асистента", "给AI助手", "AIへの指示",
            # "[AI 비서에게]", "एआई एजेंट के लिए"
            r"\b(?:hinweis|anweisung|nachricht|notiz)\w*\s+(?:an|für)\s+(?:den|die|das)?\s*(?:assistent\w*|ki|agent\w*)",
            r"\b(?:note|instruction|message|consigne)s?\s+(?:pour|à|a)\s+l['’]?\s*(?:assistant|ia|agent)",
            r"\b(?:nota|instrucci[oó]n|instru[çc][ãa]o|istruzion[ei]|aviso|mensaje|mensagem|messaggio)\s+"
            r"(?:para|al|a|per|pro|ao|à)\s+(?:el\s+|la\s+|o\s+|a\s+|l['’]\s*)?(?:asistente|assistente|ia|agente)",
            r"(?:^|[\s\[(<]|<!--)(?:ia|ai|ki|ии|ші)\s*:",
            r"(?:ассистент|асистент|агент|ии\b|ші\b)\w*\s*[:,]|(?:для|к)\s+(?:ассистент|асистент|агент|ии|ші)\w*",
            r"(?:给|致|对)(?:ai|人工智能)?(?:助手|助理|智能体)|(?:ai|アシスタント|エージェント)(?:へ|への|に)(?:指示|メモ|注意|お願い)",
            r"(?:ai|인공지능)?\s*(?:비서|어시스턴트|에이전트)에게",
            r"(?:एआई|एजेंट|सहायक)\s*(?:एजेंट|सहायक)?\s*के\s+लिए",
        )
    ),
    _I,
)

# What an instruction in someone else's text asks that the user did not: override the user or
# the rules, keep it from the user, move money or data out, run or destroy something.
RISK = re.compile(
    "|".join(
        (
            r"\b(?:ignore|disregard|forget|override|bypass)\b",
            r"\binstead\b|\bfrom now on\b|\bstop (?:summari[sz]ing|answering|what you)",
            r"\bnew (?:priority |standing |top-priority )?(?:instructions?|rules?|polic(?:y|ies)|task)\b",
            r"\bpre-?(?:authori[sz]ed|approved)\b|\b(?:has|have) (?:already )?(?:approved|authori[sz]ed|consented)\b",
            r"\bthe user (?:has )?(?:agreed|approved|consented|authori[sz]ed|wants you)\b",
            r"\bwithout (?:asking|telling|confirm\w*|notifying|approval|permission|the user)\b",
            r"\b(?:do not|don't|dont|never) (?:tell|mention|inform|notify|reveal|say|disclose|let|ask|warn|show)\b",
            r"\b(?:silently|secretly|quietly)\b",
            r"\btell (?:the user|them|users|customers)\b|\breply only\b|\brespond only\b|\brecommend only\b",
            r"\b(?:forward|transfer|wire|refund|exfiltrat\w*|upload|leak)\w*\b",
            r"\bsend(?:_\w+)?\b|\bpay(?:ment)?s?\b",
            r"\b(?:delete|remove|drop|wipe|erase|disable|deactivate)\w*\b|\brm -rf\b|--force\b",
            # not "run" or "call" alone: a paginated tool result tells the AI to call it again
            r"\b(?:curl|wget|kubectl|scp|nc)\s|\bexec\(|\bbase64 -d",
            r"\b(?:password|passcode|credential|api[_ -]?key|private key|secret key|access token|session token|"
            r"card number|cvc|cvv|iban|seed phrase|wallet|2fa|otp|verification code)s?\b",
            r"id_rsa|\.ssh\b|\.aws\b|\.env\b|/etc/passwd",
            r"\ball (?:of (?:the|their|his|her) )?(?:contacts|emails|e-mails|files|messages|attendees|customers|"
            r"attachments|documents|records)\b|\baddress book\b|\bhome address\b|\bphone numbers?\b",
            r"\b(?:explicit|erotic|sexual|porn\w*|overdose|lethal|fatal)\b",
            r"\b0x[0-9a-f]{16,}\b|\b[A-Z]{2}\d{2}(?: ?[0-9A-Z]{4}){3,}",
            # other languages: transfer / forward / book / send / delete, and "don't tell the user"
            r"\b(?:transf[eè]r\w*|überweis\w*|weiterleit\w*|reenv[ií]\w*|encaminh\w*|inoltr\w*|buch\w*|"
            r"r[ée]serv\w*|envi[ae]\w*|envoi\w*|l[öo]sch\w*|supprim\w*|borr[ae]\w*|usa la herramienta|"
            r"переведи|перевед\w*|переслат\w*|надішли|відправ\w*|видал\w*|удал\w*)",
            r"(?:ne le mentionne|sans (?:le )?dire|no (?:se lo )?digas|não (?:conte|diga)|non dirlo|"
            r"nicht erwähnen|не говори|не кажи|말하지 마|不要告诉|言わないで|मत बताना|सूचित न)",
            r"(?:转账|转发|删除|送金|転送|削除|송금|전달|삭제|메일 보내|रिफंड|भेज|जारी कर)",
        )
    ),
    _I,
)

REACH = 300  # characters after an address in which the risk cue must stand (before it: 80)


def planted_instruction(text: str) -> str | None:
    """The address and the risk cue of the first instruction planted for the AI in `text`
    ("address ... cue", at most 120 characters), or None."""
    for m in ADDRESS.finditer(text):
        start, end = max(0, m.start() - 80), min(len(text), m.end() + REACH)
        risk = RISK.search(text, start, end)
        if risk is not None:
            return f"{m.group(0).strip()} ... {risk.group(0).strip()}"[:120]
    return None


__all__ = ["ADDRESS", "REACH", "RISK", "planted_instruction"]
