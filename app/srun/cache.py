"""The worker's result cache: recent answers per (surface, model, request), LRU, bounded by
--result-cache-entries (0 turns it off). Answers are deterministic functions of the request
(the engine has no sampling), so a hit is exactly what a recomputation would return. Requests
asking for `return_meta` bypass it: their timings describe one computation."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any


class ResultCache:
    def __init__(self, entries: int) -> None:
        if entries < 0:
            raise ValueError("entries must be >= 0")
        self.entries = entries
        self._store: OrderedDict[str, bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(surface: str, model: str, body: dict[str, Any]) -> str | None:
        if not isinstance(body, dict) or (body.get("options") or {}).get("return_meta"):
            return None
        rest = {k: v for k, v in body.items() if k != "model"}
        try:
            return f"{surface}\x00{model}\x00" + json.dumps(rest, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return None

    def get(self, key: str | None) -> bytes | None:
        if key is None or not self.entries:
            return None
        found = self._store.get(key)
        if found is None:
            self.misses += 1
            return None
        self._store.move_to_end(key)
        self.hits += 1
        return found

    def put(self, key: str | None, payload: bytes) -> None:
        if key is None or not self.entries:
            return
        self._store[key] = payload
        self._store.move_to_end(key)
        while len(self._store) > self.entries:
            self._store.popitem(last=False)

    def __len__(self) -> int:
        return len(self._store)
