"""Cheap static checks that keep the structure from growing back (docs/architecture.md, "Habits").

- Units a reader can hold: no file in app/ over 500 lines, none in deployments/ over 200.
- At most 10 `# type: ignore` in app/ and deployments/, each followed by its reason
  (`# type: ignore[code]  # why`).
- Unit tests never start Ray: no call to ray.init, serve.run (unless with
  `_local_testing_mode=True`), serve.start or ray.cluster_utils.Cluster, and no `ray start`
  command, anywhere under tests/unit. Those tests live under tests/integration.
- Unit tests never wait a fixed time: under tests/unit, a `time.sleep(<positive number>)` or
  `asyncio.sleep(<positive number>)` is allowed only as the pause of a polling loop, that is
  inside a `while` loop or inside a `for` loop that can `break`/`return` (it waits for a
  condition). Anything else is a fixed sleep: inject a clock or wait for the condition.
  `asyncio.sleep(0)` (yield to the loop) is fine.

Every failure lists each offending file and line.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MAX_LINES = {"app": 500, "deployments": 200}
MAX_TYPE_IGNORES = 10
UNIT_TESTS = ROOT / "tests" / "unit"

_TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")
_RAY_STARTERS = {"ray.init", "ray.serve.start", "ray.serve.run", "ray.cluster_utils.Cluster"}
_SLEEPS = {"time.sleep", "asyncio.sleep"}


def _python_files(*folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


# ----------------------------------------------------------------------------- sizes


def test_files_stay_small_enough_to_read() -> None:
    too_long = []
    for folder, limit in MAX_LINES.items():
        for path in _python_files(folder):
            lines = len(path.read_text().splitlines())
            if lines > limit:
                too_long.append(f"{_where(path, lines)}: {lines} lines (at most {limit} in {folder}/)")
    assert not too_long, "\n".join(too_long)


# ----------------------------------------------------------------------------- type: ignore


def _type_ignores(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text after the ignore) for each `# type: ignore` comment (never in strings)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    for token in tokens:
        if token.type == tokenize.COMMENT:
            match = _TYPE_IGNORE.search(token.string)
            if match:
                yield token.start[0], match.group("rest")


@pytest.mark.slow
def test_type_ignores_are_few_and_explained() -> None:
    found = [
        (path, line, rest)
        for path in _python_files("app", "deployments")
        for line, rest in _type_ignores(path)
    ]
    problems = [
        f"{_where(path, line)}: `# type: ignore` without a reason after it"
        for path, line, rest in found
        if not rest.strip(" #:-—")
    ]
    if len(found) > MAX_TYPE_IGNORES:
        listing = "\n".join(_where(path, line) for path, line, _ in found)
        problems.append(
            f"{len(found)} `# type: ignore` (at most {MAX_TYPE_IGNORES}); fix the types:\n{listing}"
        )
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- AST helpers


def _imported_names(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted name it was imported as (`from ray import serve` -> serve: ray.serve)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.partition(".")[0]
                names[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, imported: dict[str, str]) -> str | None:
    """`serve.run` -> `ray.serve.run`, resolving the leftmost name through the imports."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(imported.get(node.id, node.id))
    return ".".join(reversed(parts))


def _unit_test_trees() -> Iterator[tuple[Path, ast.AST]]:
    for path in _python_files("tests/unit"):
        yield path, ast.parse(path.read_text(), filename=str(path))


# ----------------------------------------------------------------------------- Ray in unit tests


def _local_testing(call: ast.Call) -> bool:
    return any(
        kw.arg == "_local_testing_mode" and isinstance(kw.value, ast.Constant) and kw.value.value is True
        for kw in call.keywords
    )


def _starts_ray_cli(call: ast.Call) -> bool:
    """A `ray start` command line: "ray start ..." or ["ray", "start", ...]."""
    for arg in call.args:
        if (
            isinstance(arg, ast.Constant)
            and isinstance(arg.value, str)
            and re.search(r"\bray start\b", arg.value)
        ):
            return True
        if isinstance(arg, ast.List | ast.Tuple) and len(arg.elts) >= 2:
            head = [e.value for e in arg.elts[:2] if isinstance(e, ast.Constant)]
            if len(head) == 2 and str(head[0]).endswith("ray") and head[1] == "start":
                return True
    return False


@pytest.mark.slow
def test_unit_tests_never_start_ray() -> None:
    offenders = []
    for path, tree in _unit_test_trees():
        imported = _imported_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func, imported)
            if name in _RAY_STARTERS and not (name == "ray.serve.run" and _local_testing(node)):
                offenders.append(
                    f"{_where(path, node.lineno)}: calls {name} (move the test to tests/integration)"
                )
            elif _starts_ray_cli(node):
                offenders.append(
                    f"{_where(path, node.lineno)}: runs `ray start` (move the test to tests/integration)"
                )
    assert not offenders, "\n".join(offenders)


# ----------------------------------------------------------------------------- fixed sleeps


def _positive_number(call: ast.Call) -> bool:
    if not call.args:
        return False
    arg = call.args[0]
    return isinstance(arg, ast.Constant) and isinstance(arg.value, int | float) and arg.value > 0


def _polling_loops(tree: ast.AST) -> set[int]:
    """ids of the nodes inside a polling loop (a while, or a for that can break/return)."""
    inside: set[int] = set()
    for loop in ast.walk(tree):
        exits = isinstance(loop, ast.For | ast.AsyncFor) and any(
            isinstance(node, ast.Break | ast.Return) for stmt in loop.body for node in ast.walk(stmt)
        )
        if isinstance(loop, ast.While) or exits:
            inside.update(id(node) for stmt in loop.body for node in ast.walk(stmt))
    return inside


@pytest.mark.slow
def test_unit_tests_wait_for_conditions_not_fixed_sleeps() -> None:
    offenders = []
    for path, tree in _unit_test_trees():
        imported = _imported_names(tree)
        polling = _polling_loops(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or id(node) in polling:
                continue
            name = _dotted(node.func, imported)
            if name in _SLEEPS and _positive_number(node):
                offenders.append(
                    f"{_where(path, node.lineno)}: fixed {name}({ast.unparse(node.args[0])}); "
                    "inject a clock or wait for the condition"
                )
    assert not offenders, "\n".join(offenders)
