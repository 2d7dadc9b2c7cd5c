"""scripts/tune_guard_band.py's score caches: one entry per row, and a cache of other rows (the
same file filtered by `--unread`, or another rows file) is refused, never replayed misaligned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.benchmark.script_loader import load_script

tune = load_script("tune_guard_band")


def test_a_cache_is_computed_once_then_read(tmp_path: Path) -> None:
    cache, calls = tmp_path / "scores.json", []

    def compute() -> list[float]:
        calls.append(1)
        return [0.1, 0.9]

    assert tune.per_row_cache(cache, 2, compute) == [0.1, 0.9]
    assert tune.per_row_cache(cache, 2, compute) == [0.1, 0.9]
    assert len(calls) == 1 and json.loads(cache.read_text()) == [0.1, 0.9]


def test_a_cache_of_other_rows_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "scores.json"
    cache.write_text(json.dumps([0.1, 0.2, 0.3]))
    with pytest.raises(SystemExit, match="holds 3 rows' scores, not 2"):
        tune.per_row_cache(cache, 2, lambda: [0.0, 0.0])
