"""Modality signals: `routing.signals.modality[]` (`{name, description}`), what the request
carries or asks for, read from the human's ask (app/common/chat_text.py):

- `image` / `audio`: a content part of that kind (image_url, input_image; input_audio);
- `code`: a fenced block, lines that read as source code, or a programming request;
- `image_generation`: a request to draw, paint or generate a picture;
- `text`: user text and no image or audio part.

Rules, not a model: each case has a structural or lexical tell that a head on the sentence
vector would only blur (an image part is there or not). Confidence is 1.0 for a structural
tell (a part, a fence) and 0.8 for a lexical one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from app.common.chat_text import ask_index
from app.config.document import RouterConfig
from app.pipeline.signals.base import SignalContext
from app.pipeline.signals.labels import LabelFamily

FAMILY = "modality"
IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
AUDIO_PARTS = frozenset({"input_audio", "audio"})
_FENCE = re.compile(r"```|~~~")
_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |#include|function\b|const |let |var |public |private |"
    r"fn |func |package |SELECT |INSERT |UPDATE |CREATE TABLE|for \(|if \(|while \(|return\b|}\s*$|.*;\s*$)",
    re.MULTILINE,
)
_PROGRAMMING = re.compile(
    r"\b(python|javascript|typescript|java|c\+\+|c#|golang|rust|kotlin|swift|php|ruby|sql|bash|"
    r"powershell|regex|json schema|html|css|react|django|numpy|pandas)\b.*\b(function|script|code|"
    r"class|method|query|program|snippet|bug|error|exception|compile|implement|refactor|debug)\b|"
    r"\b(write|fix|debug|refactor|implement|optimi[sz]e|review)\b.{0,40}\b(code|function|script|"
    r"program|class|method|unit tests?|algorithm|query|regex|stack trace)\b",
    re.IGNORECASE,
)
_IMAGE_REQUEST = re.compile(
    r"\b(draw|paint|sketch|illustrate|render|generate|create|make|design|produce)\b.{0,50}\b(image|"
    r"picture|photo|photograph|illustration|drawing|painting|logo|icon|portrait|wallpaper|artwork|"
    r"sketch)s?\b|\btext[- ]to[- ]image\b",
    re.IGNORECASE,
)


def _ask_parts(messages: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    index = ask_index(messages)
    content = messages[index].get("content") if index >= 0 else None
    return [p for p in content if isinstance(p, Mapping)] if isinstance(content, list) else []


def detect_modalities(ctx: SignalContext) -> dict[str, float]:
    """modality -> confidence for each modality the request shows."""
    kinds = {str(part.get("type")) for part in _ask_parts(ctx.messages)}
    found: dict[str, float] = {}
    if kinds & IMAGE_PARTS:
        found["image"] = 1.0
    if kinds & AUDIO_PARTS:
        found["audio"] = 1.0
    text = ctx.text
    if _FENCE.search(text) or len(_CODE_LINE.findall(text)) >= 2:
        found["code"] = 1.0
    elif _PROGRAMMING.search(text):
        found["code"] = 0.8
    if _IMAGE_REQUEST.search(text):
        found["image_generation"] = 0.8
    if text.strip() and not {"image", "audio"} & found.keys():
        found["text"] = 1.0
    return found


class ModalityEvaluator(LabelFamily):
    family = FAMILY

    @classmethod
    def from_config(cls, config: RouterConfig, services: Any = None) -> ModalityEvaluator:
        return cls(config.routing.signals.modality)

    async def judge(self, ctx: SignalContext) -> tuple[dict[str, float], dict[str, Any]]:
        found = detect_modalities(ctx)
        return found, {"detected": sorted(found)}
