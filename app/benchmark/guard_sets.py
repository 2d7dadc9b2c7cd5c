"""Labeled guard sets: the JSONL `svc-sr benchmark guard` reads (docs/security.md).

One case a line: `{"text": ...}` (one user message) or `{"messages": [...]}` (a whole chat
conversation: system, assistant, tool turns and all), with `label` (`attack` or `benign`;
`block`/`allow`, `unsafe`/`safe`, 1/0 and true/false are read as the same), and optionally
`category`, `source`, `style`, `split` and `entities`. A case with `entities` (PII types) is
caught only when the router refused it as `pii_detected` naming every one of them; any other
attack is caught by any refusal. Blank lines are skipped; a malformed line is a GuardSetError
naming its file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

Label = Literal["attack", "benign"]
_ATTACK = {"attack", "block", "blocked", "unsafe", "harmful", "jailbreak", "1", "true"}
_BENIGN = {"benign", "allow", "allowed", "safe", "0", "false"}


class GuardSetError(ValueError):
    """A guard set that cannot be read: the message names the file and line."""


class GuardCase(BaseModel):
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    label: Label
    category: str = "uncategorized"
    source: str = "unknown"
    style: str | None = None
    split: str | None = None
    entities: list[str] = Field(default_factory=list)

    @field_validator("label", mode="before")
    @classmethod
    def _label(cls, value: Any) -> str:
        word = str(value).strip().lower()
        if word in _ATTACK:
            return "attack"
        if word in _BENIGN:
            return "benign"
        raise ValueError(f"label must be attack or benign, got {value!r}")

    @model_validator(mode="after")
    def _one_input(self) -> GuardCase:
        if (self.text is None) == (self.messages is None):
            raise ValueError("a case has either `text` or `messages`")
        if self.messages is not None and not self.messages:
            raise ValueError("`messages` is empty")
        return self

    @property
    def attack(self) -> bool:
        return self.label == "attack"

    def chat_messages(self) -> list[dict[str, Any]]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.text or ""}]


def load_cases(paths: Iterable[Path], split: str | None = None) -> list[GuardCase]:
    """Every case of the files, in order; with `split`, only the cases marked so."""
    cases: list[GuardCase] = []
    for path in paths:
        try:
            lines = Path(path).read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise GuardSetError(f"{path}: cannot read ({exc})") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                case = GuardCase.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError) as exc:
                detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                raise GuardSetError(f"{path}:{number}: {detail}") from exc
            if split is None or case.split == split:
                cases.append(case)
    return cases
