"""What a conversion gives back: the v0.3 document, what it changed, and where each part came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config.errors import ConfigIssue


@dataclass
class Migration:
    document: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    # (canonical path prefix, legacy path prefix): lets messages name both locations.
    path_map: list[tuple[str, str]] = field(default_factory=list)

    def legacy_path(self, canonical: str) -> str | None:
        best: tuple[str, str] | None = None
        for new, old in self.path_map:
            if (canonical == new or canonical.startswith(new + ".") or canonical.startswith(new + "[")) and (
                best is None or len(new) > len(best[0])
            ):
                best = (new, old)
        return None if best is None else best[1] + canonical[len(best[0]) :]

    def name_flat_paths(self, issues: list[ConfigIssue]) -> list[ConfigIssue]:
        """Issues found in the converted document, each message naming its flat-layout location."""
        out = []
        for issue in issues:
            old = self.legacy_path(issue.path)
            if old and old != issue.path:
                issue = issue.model_copy(update={"message": f"{issue.message} (flat layout: {old})"})
            out.append(issue)
        return out
