"""The served OpenAPI document: 3.0 (as the contract asks) and narrowable to one operation.

`served(app.openapi())` is what /openapi.json answers. FastAPI generates OpenAPI 3.1;
`to_openapi_30` rewrites the 3.1-only JSON Schema forms it uses (`anyOf` with
`{"type": "null"}`, type lists, `const`, numeric exclusive bounds, `examples`) into their
3.0 equivalents so 3.0 tooling reads the document. Before that, two corrections keep the
document true to what the app answers:
- request bodies that handlers read themselves are documented inline
  (`app.common.api_docs.json_body`), with their definitions under `$defs`: those move into
  components/schemas, so every `$ref` resolves;
- FastAPI documents 422 for request validation on every operation with parameters, but the
  app answers 400 (app.api.errors and the management routes): those 422s are dropped.
"""

from __future__ import annotations

import copy
from typing import Any

OPENAPI_VERSION = "3.0.3"
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def _schema_30(node: Any) -> Any:
    if isinstance(node, list):
        return [_schema_30(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _schema_30(value) for key, value in node.items()}
    for rewrite in (
        _nullable_options,
        _type_list,
        _const,
        _exclusive_bounds,
        _examples,
        _null_type,
        _nullable_enum,
    ):
        rewrite(out)
    return out


# The null option, before and after its own rewrite (children are rewritten first).
_NULL_OPTIONS = ({"type": "null"}, {"nullable": True})


def _nullable_options(out: dict[str, Any]) -> None:
    """anyOf/oneOf with {"type": "null"} -> the other option(s) plus nullable."""
    for key in ("anyOf", "oneOf"):
        options = out.get(key)
        if not (isinstance(options, list) and any(o in _NULL_OPTIONS for o in options)):
            continue
        rest = [o for o in options if o not in _NULL_OPTIONS]
        out.pop(key)
        if len(rest) == 1 and isinstance(rest[0], dict) and "$ref" not in rest[0]:
            out.update(rest[0])
        elif len(rest) == 1:
            out["allOf"] = rest
        elif rest:
            out[key] = rest
        out["nullable"] = True


def _type_list(out: dict[str, Any]) -> None:
    """ "type": [..., "null"] -> one type (or anyOf of them) plus nullable."""
    kind = out.get("type")
    if not isinstance(kind, list):
        return
    types = [t for t in kind if t != "null"]
    if len(types) != len(kind):
        out["nullable"] = True
    if len(types) == 1:
        out["type"] = types[0]
    else:
        out.pop("type")
        out["anyOf"] = [{"type": t} for t in types]


def _const(out: dict[str, Any]) -> None:
    if "const" in out:
        out["enum"] = [out.pop("const")]


def _exclusive_bounds(out: dict[str, Any]) -> None:
    """Numeric exclusiveMinimum/Maximum (3.1) -> minimum/maximum plus the boolean flag (3.0)."""
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = out.get(bound)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[plain] = value
            out[bound] = True


def _examples(out: dict[str, Any]) -> None:
    examples = out.get("examples")
    if isinstance(examples, list):
        out.pop("examples")
        if examples:
            out["example"] = examples[0]


def _null_type(out: dict[str, Any]) -> None:
    if out.get("type") == "null":
        out.pop("type")
        out["nullable"] = True


def _nullable_enum(out: dict[str, Any]) -> None:
    """3.0: `nullable` does not extend an `enum`; null is allowed only when the enum lists it."""
    values = out.get("enum")
    if out.get("nullable") and isinstance(values, list) and None not in values:
        out["enum"] = [*values, None]


def to_openapi_30(document: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(document)
    doc["openapi"] = OPENAPI_VERSION
    if "components" in doc and "schemas" in doc["components"]:
        doc["components"]["schemas"] = _schema_30(doc["components"]["schemas"])
    for operations in doc.get("paths", {}).values():
        for method, operation in operations.items():
            if method not in HTTP_METHODS or not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if "schema" in parameter:
                    parameter["schema"] = _schema_30(parameter["schema"])
            for content in (operation.get("requestBody") or {}).get("content", {}).values():
                if "schema" in content:
                    content["schema"] = _schema_30(content["schema"])
            for response in operation.get("responses", {}).values():
                for content in (response.get("content") or {}).values():
                    if "schema" in content:
                        content["schema"] = _schema_30(content["schema"])
    return doc


def served(document: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's generated document as /openapi.json serves it (see the module docstring)."""
    doc = copy.deepcopy(document)
    _hoist_definitions(doc)
    _drop_validation_422(doc)
    return to_openapi_30(doc)


def _operations(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        operation
        for operations in doc.get("paths", {}).values()
        for method, operation in operations.items()
        if method in HTTP_METHODS and isinstance(operation, dict)
    ]


COMPONENT_REF = "#/components/schemas/"


def _hoist_definitions(doc: dict[str, Any]) -> None:
    """Inline body schemas' `$defs` -> components/schemas (a name FastAPI already uses for a
    different schema gets an `-Input` suffix), refs rewritten to point there."""
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    for operation in _operations(doc):
        bodies = [operation.get("requestBody") or {}, *operation.get("responses", {}).values()]
        for content in (c for body in bodies for c in (body.get("content") or {}).values()):
            schema = content.get("schema")
            if isinstance(schema, dict) and "$defs" in schema:
                content["schema"] = _hoisted(schema, components)


def _hoisted(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    definitions: dict[str, Any] = schema.pop("$defs")
    names = {name: name for name in definitions}
    for name, definition in definitions.items():
        existing = components.get(name)
        if existing is not None and existing != _renamed(definition, names):
            names[name] = f"{name}-Input"
    for name, definition in definitions.items():
        target = names[name]
        moved = _renamed(definition, names)
        if components.get(target, moved) != moved:
            raise ValueError(f"two different schemas are both named {target!r} in the OpenAPI document")
        components[target] = moved
    return _renamed(schema, names)


def _renamed(node: Any, names: dict[str, str]) -> Any:
    """Refs to a definition (`#/$defs/X` or `#/components/schemas/X`) -> its component name."""
    if isinstance(node, list):
        return [_renamed(item, names) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _renamed(value, names) for key, value in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if ref.startswith(("#/$defs/", COMPONENT_REF)) and name in names:
            out["$ref"] = COMPONENT_REF + names[name]
    return out


def _drop_validation_422(doc: dict[str, Any]) -> None:
    validation_ref = COMPONENT_REF + "HTTPValidationError"
    for operation in _operations(doc):
        responses = operation.get("responses", {})
        schema = (responses.get("422", {}).get("content") or {}).get("application/json", {}).get("schema")
        if schema == {"$ref": validation_ref}:
            del responses["422"]
    components = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's, once nothing refers to them
        others = {key: value for key, value in components.items() if key != name}
        if f"'{COMPONENT_REF}{name}'" not in repr((doc.get("paths"), others)):
            components.pop(name, None)


class UnknownOperation(LookupError):
    pass


def narrow(document: dict[str, Any], path: str | None, method: str | None) -> dict[str, Any]:
    """Only `path` (and `method` on it); UnknownOperation when the document has neither."""
    if path is None and method is None:
        return document
    paths = document.get("paths", {})
    selected: dict[str, Any] = {}
    for name, operations in paths.items():
        if path is not None and name != path:
            continue
        if method is not None:
            operation = operations.get(method.lower())
            if operation is None:
                continue
            selected[name] = {method.lower(): operation}
        else:
            selected[name] = operations
    if not selected:
        what = " ".join(part for part in ((method or "").upper(), path or "") if part)
        raise UnknownOperation(f"no operation {what} in the OpenAPI document")
    out = dict(document)
    out["paths"] = selected
    return out
