"""The layering contract ([tool.importlinter] in pyproject.toml), checked with import-linter.

One test per contract, so a failure names the rule it breaks; the message is
import-linter's own report, which lists each offending import with its module and line.
The import graph is static (grimp reads the sources; nothing is imported or started).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CONTRACTS: list[dict] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "contracts"
]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


@pytest.fixture(scope="module")
def report() -> str:
    """lint-imports' report over every contract (one graph build for all of them)."""
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    output = result.stdout + result.stderr
    assert "Contracts:" in output, f"lint-imports did not run its contracts:\n{output}"
    return output


def _broken_section(report: str, name: str) -> str:
    """The part of the report that explains why contract `name` is broken."""
    _, _, details = report.partition("Broken contracts")
    start = details.find(f"\n{name}\n")
    if start < 0:
        return report
    rest = details[start + 1 :]
    ends = [rest.find(f"\n{other['name']}\n") for other in CONTRACTS if other["name"] != name]
    end = min((e for e in ends if e > 0), default=len(rest))
    return rest[:end]


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c["id"] for c in CONTRACTS])
def test_contract_is_kept(report: str, contract: dict) -> None:
    name = contract["name"]
    verdicts = [line for line in report.splitlines() if line.startswith(f"{name} ")]
    assert verdicts, f"contract {name!r} missing from the report:\n{report}"
    assert " KEPT" in verdicts[0], _broken_section(report, name)


def test_every_contract_has_an_id_and_a_name() -> None:
    ids = [contract.get("id") for contract in CONTRACTS]
    assert all(ids) and len(set(ids)) == len(ids)
    assert all(contract.get("name") for contract in CONTRACTS)
