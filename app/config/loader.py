"""Read a configuration (YAML or JSON, v0.3 or the older flat layout) into a RouterConfig.

Three stages, each reporting every problem it finds with its path:
1. parse: text -> mapping (syntax errors with line/column, duplicate keys, empty file);
2. schema: pydantic validation of the canonical document (a flat file goes through the
   converter, app/config/legacy, first; this module knows no flat key);
3. semantics: cross-references (validate.py).
Environment variables are deliberately not expanded: the file is the whole truth, and
secrets are referenced by name (`api_key_env`), never interpolated into the document.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from app.common.body_limits import HARD_MAX_DEPTH, JsonRejected, decode_json
from app.config import legacy
from app.config.document import RouterConfig
from app.config.errors import ConfigError, ConfigIssue, issues_from_validation_error
from app.config.recipes import recipe_issues
from app.config.validate import semantic_issues

# A document expanding (through YAML aliases) to more nodes than this is refused:
# a few lines of nested aliases can otherwise expand to gigabytes.
MAX_NODES = 1_000_000

log = logging.getLogger("svc_sr.config")

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(_BaseLoader):
    """SafeLoader that rejects duplicate keys (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue  # keys brought in by `<<:` merges may be overridden on purpose
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r}",
                    key_node.start_mark,
                )
            seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


@dataclass
class LoadedConfig:
    config: RouterConfig
    warnings: list[str] = field(default_factory=list)
    source_hash: str = ""
    legacy: bool = False
    source: str = "<memory>"


def canonical_json(config: RouterConfig) -> str:
    """The document svc-sr hashes and versions: sorted keys, no whitespace, nulls dropped."""
    return json.dumps(config.to_document(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_hash(config: RouterConfig) -> str:
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


def to_yaml(config: RouterConfig, *, compact: bool = True) -> str:
    """The canonical v0.3 document as YAML (what `svc-sr config migrate` writes).

    `compact` leaves out values equal to their defaults, so the file shows what its
    author chose; both forms load to the same config (same source_hash).
    """
    if compact:
        document = {"version": config.version}
        document.update(
            config.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True, mode="json")
        )
    else:
        document = config.to_document()
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)


def load_config(path: str | Path) -> LoadedConfig:
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise ConfigError(
            [_parse_issue(f"cannot read {source}: {reason}", "unreadable")], source=source
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [_parse_issue(f"not UTF-8 text (byte {exc.start}): {exc.reason}", "not_utf8")], source=source
        ) from None
    return parse_config(text, source=source)


def parse_config(data: dict[str, Any] | str | bytes, *, source: str = "<memory>") -> LoadedConfig:
    """Validate a document given as text (YAML or JSON) or as an already-parsed mapping."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                [_parse_issue(f"not UTF-8 text: {exc.reason}", "not_utf8")], source=source
            ) from None
    if isinstance(data, str):
        document = parse_text(data, source=source)
    elif isinstance(data, dict):
        _check_size(data, source)
        document = copy.deepcopy(data)
    else:
        raise ConfigError(
            [_parse_issue(f"a configuration is a mapping, got {type(data).__name__}", "not_a_mapping")],
            source=source,
        )
    return _build(document, source)


def parse_text(text: str, *, source: str = "<memory>") -> dict[str, Any]:
    """YAML/JSON text -> mapping, or ConfigError at stage `parse`."""
    if not text.strip():
        raise ConfigError([_parse_issue("the document is empty", "empty")], source=source)
    document: Any
    if text.lstrip().startswith("{"):
        try:
            document = decode_json(text, HARD_MAX_DEPTH)
        except JsonRejected as exc:
            if not exc.malformed:
                raise ConfigError(
                    [_parse_issue(f"the JSON document: {exc}", "json_syntax")], source=source
                ) from None
            try:  # YAML flow style also starts with `{`
                document = _load_yaml(text, source)
            except ConfigError:
                raise ConfigError(
                    [_parse_issue(f"the JSON document is {exc}", "json_syntax")], source=source
                ) from None
    else:
        document = _load_yaml(text, source)
    if document is None:
        raise ConfigError([_parse_issue("the document is empty", "empty")], source=source)
    if not isinstance(document, dict):
        raise ConfigError(
            [_parse_issue(f"the top level must be a mapping, got {_kind(document)}", "not_a_mapping")],
            source=source,
        )
    _check_size(document, source)
    return document


def _load_yaml(text: str, source: str) -> Any:
    try:
        _check_yaml_depth(text, source)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = exc.problem or exc.context or "invalid YAML"
        code = "duplicate_key" if "duplicate key" in problem else "yaml_syntax"
        raise ConfigError([_parse_issue(f"{where}{problem}", code)], source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError([_parse_issue(str(exc), "yaml_syntax")], source=source) from None


def _check_yaml_depth(text: str, source: str) -> None:
    """The composer recurses once per level: a document nested deeper than HARD_MAX_DEPTH is
    refused from the parser's events first (stopping at the first level too many)."""
    depth = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > HARD_MAX_DEPTH:
                raise ConfigError([_parse_issue(_too_deep(), "too_deep")], source=source)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _too_deep() -> str:
    return f"the document nests deeper than {HARD_MAX_DEPTH} levels"


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _parse_issue(message: str, code: str) -> ConfigIssue:
    return ConfigIssue(path="", message=message, code=code, stage="parse")


def _check_size(document: Any, source: str) -> None:
    """Count nodes as if aliases were expanded (memoised, so linear in the real size)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def count(node: Any, depth: int = 0) -> int:
        if not isinstance(node, dict | list):
            return 1
        if depth >= HARD_MAX_DEPTH:  # aliases nest too: bounded here, so the count cannot recurse on
            raise ConfigError([_parse_issue(_too_deep(), "too_deep")], source=source)
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(
                [_parse_issue("recursive alias: a node contains itself", "recursive_alias")], source=source
            )
        active.add(key)
        children = node.values() if isinstance(node, dict) else node
        total = 1
        for child in children:
            total += count(child, depth + 1)
            if total > MAX_NODES:
                raise ConfigError(
                    [_parse_issue(f"document expands to more than {MAX_NODES} nodes", "too_large")],
                    source=source,
                )
        active.discard(key)
        sizes[key] = total
        return total

    count(document)


def _build(document: dict[str, Any], source: str) -> LoadedConfig:
    warnings: list[str] = []
    migration = _converted(document, source) if legacy.is_legacy(document) else None
    if migration is not None:
        document = migration.document
        warnings.extend(migration.warnings)
    document = copy.deepcopy(document)  # the old `read` part names converted, never in the caller's
    warnings.extend(legacy.convert_read_parts(document))
    try:
        config = RouterConfig.model_validate(document)
    except ValidationError as exc:
        issues = issues_from_validation_error(exc, document=document, root=RouterConfig, hint=_hint)
        raise ConfigError(_named(issues, migration), source=source) from None
    except (TypeError, ValueError, RecursionError) as exc:  # a validator tripped on an odd value
        issue = ConfigIssue(path="", message=f"invalid document: {exc}", code="invalid", stage="validate")
        raise ConfigError([issue], source=source) from None
    errors, more = semantic_issues(config)
    recipe_errors, recipe_warnings = recipe_issues(config)
    errors, more = errors + recipe_errors, more + recipe_warnings
    if errors:
        raise ConfigError(_named(errors, migration), source=source)
    warnings.extend(more)
    return LoadedConfig(
        config=config,
        warnings=warnings,
        source_hash=config_hash(config),
        legacy=migration is not None,
        source=source,
    )


def _converted(document: dict[str, Any], source: str) -> legacy.Migration:
    """The flat layout through the converter `svc-sr config migrate` uses, with its deprecation
    logged once per load."""
    try:
        migration = legacy.migrate(document)
    except ConfigError as exc:
        raise ConfigError(exc.issues, source=source) from None
    log.warning(legacy.deprecation(source, is_file=os.path.isfile(source)))
    return migration


def _hint(parts: list[str | int], error: ErrorDetails) -> str:
    if len(parts) == 1 and error["type"] == "extra_forbidden":
        return legacy.mixed_layout_hint(str(parts[0]))
    if parts == ["version"]:
        return "; svc-sr reads canonical v0.3 documents, or the flat layout without v0.3 sections"
    return ""


def _named(issues: list[ConfigIssue], migration: legacy.Migration | None) -> list[ConfigIssue]:
    return issues if migration is None else migration.name_flat_paths(issues)
