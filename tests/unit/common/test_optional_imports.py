"""Optional third-party imports turned off while a package loads (app/common/optional_imports.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.common.optional_imports import without_modules


def test_a_blocked_module_fails_to_import_then_imports_again() -> None:
    name = "svc_sr_never_installed_module"
    with without_modules(name, "json"):  # json is imported already: left alone
        with pytest.raises(ImportError):
            __import__(name)
        assert sys.modules["json"] is not None
    assert name not in sys.modules
    with pytest.raises(ModuleNotFoundError):  # back to "not installed", not a stuck None entry
        __import__(name)


def test_pii_detection_does_not_load_torch_and_torch_still_imports() -> None:
    """presidio and thinc import torch only to look for a GPU (~60 MiB per process)."""
    code = (
        "import sys\n"
        "from app.runtime.registry import load_model\n"
        "model = load_model('pii-detector', use_ner=True)\n"
        "found = model.detect(['call 415-555-0100, John Smith'], None, None)[0]\n"
        "assert {e.type for e in found.entities} >= {'PHONE_NUMBER', 'PERSON'}, found\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('torch') is None or __import__('torch')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
