"""JSON Schema generated from the config models."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from app.config.schema import SCHEMA_ID, config_json_schema, write_schema

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = yaml.safe_load((ROOT / "configs" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def schema() -> dict:
    return config_json_schema()


def test_schema_shape(schema: dict) -> None:
    assert schema["$id"] == SCHEMA_ID
    assert "v0.3" in schema["title"]
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert "global" in schema["properties"] and "global_" not in schema["properties"]
    assert {"version", "listeners", "providers", "routing"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(schema)


def test_shipped_configs_satisfy_the_schema(schema: dict) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    for path in [ROOT / "configs" / "config.yaml", ROOT / "configs" / "examples" / "domains.yaml"]:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert errors == [], (path, [e.message for e in errors])


def test_schema_checks_plugin_configurations(schema: dict) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    doc = copy.deepcopy(DEFAULT)
    doc["routing"]["decisions"][0]["plugins"][0]["configuration"] = {"mesage": "typo"}
    assert list(validator.iter_errors(doc))
    doc = copy.deepcopy(DEFAULT)
    doc["global"]["stores"]["response_cache"]["similarity_threshold"] = 3
    assert list(validator.iter_errors(doc))


def test_committed_schema_file_is_current(schema: dict, tmp_path: Path) -> None:
    written = write_schema(tmp_path / "sub" / "config.schema.json")
    assert json.loads(written.read_text()) == schema
    committed = ROOT / "docs" / "config.schema.json"
    assert json.loads(committed.read_text()) == schema, (
        "regenerate docs/config.schema.json with write_schema()"
    )
