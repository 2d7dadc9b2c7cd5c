"""The old names of a rule's `read` parts (docs/configuration.md "What a rule reads"): `ask` is
now `latest_ask` and `tools` is `tool_results`. A document that still says them loads, each
list converted in place with one warning naming where; the canonical models know only the
new names."""

from __future__ import annotations

from typing import Any

RENAMED_READ_PARTS = {"ask": "latest_ask", "tools": "tool_results"}


def convert_read_parts(document: Any, path: str = "") -> list[str]:
    """Rename the old `read` parts everywhere in `document` (a rule's `read` is the only key of
    that name in a config); the warnings of what was renamed."""
    warnings: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "read" and isinstance(value, list):
                old = [p for p in value if isinstance(p, str) and p in RENAMED_READ_PARTS]
                if old:
                    document[key] = [RENAMED_READ_PARTS.get(p, p) if isinstance(p, str) else p for p in value]
                    names = ", ".join(f"{p} -> {RENAMED_READ_PARTS[p]}" for p in dict.fromkeys(old))
                    warnings.append(f"{where}: read part renamed ({names})")
            else:
                warnings += convert_read_parts(value, where)
    elif isinstance(document, list):
        for index, item in enumerate(document):
            warnings += convert_read_parts(item, f"{path}[{index}]")
    return warnings
