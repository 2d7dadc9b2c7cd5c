"""The converter of the reference router's older flat layout (v0.1) to canonical v0.3.

The `read` parts' old names (`ask`, `tools`) in any document: `convert_read_parts`
(read_parts.py), on every load. One entry point for the flat layout, `migrate(document)`: `svc-sr config migrate FILE` and every load of a flat
file (app/config/loader.py, which logs `deprecation(...)` once per such load) go through it.
The converter works on plain mappings and knows every old spelling of a key (keys.py); the
loader and the canonical models know only v0.3. docs/configuration.md "Flat layout (v0.1)".
"""

from __future__ import annotations

import shlex
from typing import Any

from app.config.legacy.keys import LEGACY_KEY_HOME, LEGACY_KEYS, is_legacy, mixed_layout_hint
from app.config.legacy.migration import Migration
from app.config.legacy.migrator import Migrator
from app.config.legacy.read_parts import RENAMED_READ_PARTS, convert_read_parts

__all__ = [
    "LEGACY_KEYS",
    "LEGACY_KEY_HOME",
    "Migration",
    "RENAMED_READ_PARTS",
    "convert_read_parts",
    "deprecation",
    "is_legacy",
    "migrate",
    "migrate_legacy",
    "mixed_layout_hint",
]


def migrate(document: dict[str, Any]) -> Migration:
    """Convert a flat-layout document to canonical v0.3 (the input is not modified).

    Raises ConfigError when the flat document is malformed in a way that cannot be
    converted (e.g. `vllm_endpoints` not a list); everything else is left for the
    canonical validation to judge.
    """
    return Migrator(document).run()


def migrate_legacy(document: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`migrate` as (v0.3 document, warnings)."""
    migration = migrate(document)
    return migration.document, migration.warnings


def deprecation(source: str, *, is_file: bool) -> str:
    """The deprecation warning of one load of a flat document, naming the command that ends it."""
    target = shlex.quote(source) if is_file else "FILE"
    return (
        f"{source}: the flat config layout (v0.1) is deprecated and converted on every load; "
        f"`svc-sr config migrate {target}` converts it once (-o writes the v0.3 file)"
    )
