"""Building blocks of the served OpenAPI document's operations (plain data, no FastAPI).

Handlers that read their body themselves (to keep the client's bytes, to answer in their
own error body) document it with `json_body(Model)`: the model's JSON Schema with its
definitions under `$defs`, which app.management.openapi moves into components/schemas.
`errors(Model, {status: description})` documents failure statuses with their body model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, GetJsonSchemaHandler, TypeAdapter
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema

from app.common.errors import ErrorBody

REF_TEMPLATE = "#/components/schemas/{model}"
# A character `str.strip()` keeps (pydantic's Rust regex and a schema's ECMA regex agree on
# it): the pattern of a field that must not be blank.
NON_BLANK = r"[^\s\x1c-\x1f\x85]"
Responses = dict[int | str, dict[str, Any]]
# The largest `after_sequence` a page may start after. Sequences count from 1 and never come
# near it; the Redis stores' scripts pass numbers at 14 significant digits (a bigger one
# reached Redis as `1e+28` and failed as a 503).
MAX_SEQUENCE = 10**12


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s validation schema; its definitions stay under `$defs`, refs point at components."""
    return model.model_json_schema(ref_template=REF_TEMPLATE)


def json_body(
    model: type[BaseModel], *, description: str | None = None, required: bool = True
) -> dict[str, Any]:
    """openapi_extra: a JSON body that validates as `model` (`required` False: no body reads as `{}`)."""
    body: dict[str, Any] = {
        "required": required,
        "content": {"application/json": {"schema": model_schema(model)}},
    }
    if description:
        body["description"] = description
    return {"requestBody": body}


def errors(model: type[BaseModel], statuses: Mapping[int, str]) -> Responses:
    """FastAPI `responses`: each status answered with `model`'s body."""
    return {status: {"description": text, "model": model} for status, text in statuses.items()}


# The body-size middleware (app.api.errors) answers 413 before any route that reads a body.
BODY_TOO_LARGE: Responses = errors(
    ErrorBody, {413: "request body over global.services.data_plane.max_body_bytes (body_too_large)"}
)


class SchemaKeys:
    """`Annotated[T, SchemaKeys(minProperties=2)]`: T's schema plus these keys, for a
    constraint a validator enforces with its own message (documented, not enforced here)."""

    def __init__(self, **keys: Any) -> None:
        self.keys = keys

    def __get_pydantic_json_schema__(self, core: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(core), **self.keys}


class DocumentedAs:
    """`Annotated[T, DocumentedAs(U)]`: validated as T, documented as U. For a field whose items
    are validated one by one later (an invalid one is answered, not refused), so the schema
    can still say what a valid item is."""

    def __init__(self, documented: Any) -> None:
        self.documented = documented

    def __get_pydantic_json_schema__(self, _core: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(TypeAdapter(self.documented).core_schema)


def _left_out(value: None) -> None:
    raise ValueError("must not be null: leave the field out instead")


# `X | Absent = Field(default=None, json_schema_extra=no_default)`: an optional request field
# whose None means "absent". Its schema says neither null nor a default, and a client's explicit
# null is refused as the schema says (pydantic does not validate a default, so only a null the
# client sent reaches the validator).
Absent = SkipJsonSchema[Annotated[None, AfterValidator(_left_out)]]


def no_default(schema: dict[str, Any]) -> None:
    """json_schema_extra of an optional field whose None means "absent" (its schema excludes
    null): no `default: null` a client could copy."""
    schema.pop("default", None)


def exactly_one(*fields: str) -> dict[str, Any]:
    """json_schema_extra of a model that takes exactly one of `fields`."""
    return {"oneOf": [{"required": [name]} for name in fields]}
