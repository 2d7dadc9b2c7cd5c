"""Configuration problems, each naming where in the document it is and why.

One shape for every stage (YAML parsing, schema validation, cross-reference checks)
so the CLI, the management API and the loader report rejections the same way.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

Stage = Literal["parse", "validate"]

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-]+$")


class ConfigIssue(BaseModel):
    """One rejection: `path` is dotted/indexed, e.g. `routing.decisions[2].modelRefs[0].model`."""

    path: str
    message: str
    code: str
    stage: Stage = "validate"

    def __str__(self) -> str:
        where = self.path or "(document)"
        return f"{where}: {self.message} [{self.code}]"


class ConfigError(ValueError):
    """A configuration was rejected; `issues` lists every problem found (not only the first)."""

    def __init__(self, issues: Sequence[ConfigIssue], *, source: str = "<memory>") -> None:
        self.issues: list[ConfigIssue] = list(issues)
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        count = len(self.issues)
        head = f"invalid configuration {self.source}: {count} issue{'s' if count != 1 else ''}"
        return "\n".join([head, *(f"  - {issue}" for issue in self.issues)])

    def __str__(self) -> str:
        return self._render()


def format_path(parts: Iterable[str | int]) -> str:
    """('routing', 'decisions', 2, 'name') -> 'routing.decisions[2].name'."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def join_path(base: str, *parts: str | int) -> str:
    tail = format_path(parts)
    if not base:
        return tail
    if not tail:
        return base
    return base + tail if tail.startswith("[") else f"{base}.{tail}"


# ---------------------------------------------------------------- pydantic errors -> issues

# pydantic inserts the names of union members / validator wrappers into `loc`; they
# are not keys of the user's document and must not appear in the reported path.
_LOC_TAG = re.compile(
    r"[\[\(]|^(int|str|float|bool|none|list|dict|tuple|set|bytes|decimal|url|model|model-fields|"
    r"function-\w+|lax-or-strict|json-or-python|is-instance|constrained-\w+|literal-\w*|"
    r"tagged-union|union|chain|nullable|default)$"
)
_MISSING = object()
_MSG_PREFIXES = ("Value error, ", "Assertion failed, ")


def _clean_loc(loc: Sequence[str | int], document: Any) -> list[str | int]:
    parts: list[str | int] = []
    node = document
    for element in loc:
        if isinstance(element, int):
            parts.append(element)
            node = node[element] if isinstance(node, list) and 0 <= element < len(node) else _MISSING
            continue
        if isinstance(node, dict) and element in node:
            parts.append("global" if element == "global_" and not parts else element)
            node = node[element]
            continue
        if _LOC_TAG.search(element):
            continue
        parts.append("global" if element == "global_" and not parts else element)
        node = node.get(element, _MISSING) if isinstance(node, dict) else _MISSING
    return parts


def _strip_optional(tp: Any) -> Any:
    if get_origin(tp) in (Union, UnionType):
        options = [arg for arg in get_args(tp) if arg is not type(None)]
        return options[0] if options else tp
    return tp


def _type_at(root: Any, parts: Sequence[str | int]) -> Any:
    tp = root
    for element in parts:
        tp = _strip_optional(tp)
        origin = get_origin(tp)
        if isinstance(element, int):
            if origin is not list:
                return None
            tp = get_args(tp)[0]
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            for name, info in tp.model_fields.items():
                if element in (name, info.alias):
                    tp = info.annotation
                    break
            else:
                return None
        elif origin is dict:
            tp = get_args(tp)[1]
        else:
            return None
    return _strip_optional(tp)


def allowed_keys(root: type[BaseModel] | None, parts: Sequence[str | int]) -> list[str]:
    """Field names (aliases where set) accepted at `parts` below `root`; [] if unknown."""
    if root is None:
        return []
    tp = _type_at(root, parts)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [info.alias or name for name, info in tp.model_fields.items()]
    return []


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def issues_from_validation_error(
    exc: ValidationError,
    *,
    document: Any = None,
    prefix: str = "",
    root: type[BaseModel] | None = None,
    stage: Stage = "validate",
    hint: Callable[[list[str | int], ErrorDetails], str] | None = None,
) -> list[ConfigIssue]:
    """One ConfigIssue per pydantic error, with document paths (aliases, no union tags)."""
    issues: list[ConfigIssue] = []
    for error in exc.errors(include_url=False):
        parts = _clean_loc(error["loc"], document)
        kind = error["type"]
        message = error["msg"]
        for lead in _MSG_PREFIXES:
            if message.startswith(lead):
                message = message[len(lead) :]
        extra = hint(parts, error) if hint is not None else ""
        if kind == "extra_forbidden" and parts:
            suggestion = "" if extra else did_you_mean(str(parts[-1]), allowed_keys(root, parts[:-1]))
            message = "unknown key" + suggestion
        elif kind == "missing":
            message = "required key is missing"
        elif kind not in ("value_error", "assertion_error") and not isinstance(
            error.get("input"), dict | list
        ):
            message += f" (got {_short(error.get('input'))})"
        message += extra
        issues.append(ConfigIssue(path=join_path(prefix, *parts), message=message, code=kind, stage=stage))
    return issues
