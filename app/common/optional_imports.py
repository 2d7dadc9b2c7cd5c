"""Third-party optional imports a process does not need, turned off while a package loads.

Several libraries import a heavy package only "if installed": presidio and thinc (spaCy) import
torch, presidio imports transformers, Ray Serve imports pandas. The development venv has all
of them (training, pymilvus), so every process that loads those libraries paid for packages it
never calls: torch alone is ~60 MiB of one replica's memory (docs/performance.md, "Memory of
the local stack"). A None entry in sys.modules makes `import name` raise ImportError, which
those libraries take as "not installed"; the entry is removed again afterwards, so the package
stays importable for code that does use it. The entry is process-wide for the length of the
block: a second thread importing the same package in that instant would see it missing, so it
wraps only start-up imports (a replica's constructor, a worker's setup hook). Holding the import
lock instead could deadlock against a thread already mid-import.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast


@contextmanager
def without_modules(*names: str) -> Iterator[None]:
    """Within the block, `import name` fails for each of `names` not imported yet."""
    modules = cast(dict[str, Any], sys.modules)
    blocked = [name for name in names if name not in modules]
    for name in blocked:
        modules[name] = None  # a None entry: "import fails"
    try:
        yield
    finally:
        for name in blocked:
            if modules.get(name, 0) is None:
                del modules[name]
