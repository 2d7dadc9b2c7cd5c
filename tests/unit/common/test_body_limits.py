"""The body limits every door applies (app/common/body_limits.py, docs/management-api.md
"Limits"): the decoder's refusals, and the status and error body each door answers them with,
in process (the live graph's answers: tests/integration/test_api_promises.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.common.body_limits import DEFAULT_MAX_DEPTH, HARD_MAX_DEPTH, JsonRejected, decode_json
from app.config.errors import ConfigError
from app.config.loader import parse_text
from tests.unit.management.test_management_support import Harness, base_document


def nested(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


def test_nesting_up_to_the_limit_passes_and_one_more_is_refused() -> None:
    assert decode_json(nested(DEFAULT_MAX_DEPTH)) is not None
    with pytest.raises(JsonRejected, match=f"deeper than {DEFAULT_MAX_DEPTH} levels") as refused:
        decode_json(nested(DEFAULT_MAX_DEPTH + 1))
    assert not refused.value.malformed
    assert decode_json('{"a":' * 20 + "1" + "}" * 20, max_depth=20) is not None
    with pytest.raises(JsonRejected):
        decode_json('{"a":' * 21 + "1" + "}" * 21, max_depth=20)


def test_a_document_nested_50000_deep_is_refused_without_recursing() -> None:
    with pytest.raises(JsonRejected, match="deeper than"):
        decode_json(nested(50_000))
    with pytest.raises(JsonRejected, match="deeper than"):
        decode_json(nested(50_000, '{"a":', "}"), max_depth=HARD_MAX_DEPTH)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"c": "a \\ud800 b"}', "surrogate"),  # a lone high surrogate escape
        (b'{"c": "\\udc00"}', "surrogate"),  # a lone low one
        ('{"c": "\ud800"}', "surrogate"),  # a Python str holding one
        (b'{"n": 1e400}', "double"),
        (b'{"n": -1e999}', "double"),
        (b'{"n": NaN}', "not valid JSON"),
        (b'{"c": "raw \x01 control"}', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"{} trailing", "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_what_no_later_step_could_carry_is_refused(raw: bytes | str, reason: str) -> None:
    with pytest.raises(JsonRejected, match=reason):
        decode_json(raw)


def test_text_json_carries_passes() -> None:
    decoded = decode_json(b'\xef\xbb\xbf{"c": "tab\\t nul\\u0000 bell\\u0007 \\ud83d\\ude00", "n": 1e308}')
    assert decoded == {"c": "tab\t nul\x00 bell\x07 \U0001f600", "n": 1e308}
    assert decode_json(b"[123456789012345678901234567890]") == [123456789012345678901234567890]


def test_configuration_documents_are_bounded_too() -> None:
    for text in (
        '{"a": ' + nested(50_000) + "}",
        "a: " + nested(50_000),
        "a: &a [1]\n" + "b: [" * 300 + "]" * 300,
    ):
        with pytest.raises(ConfigError, match="deeper than"):
            parse_text(text)
    assert parse_text('{"routing": {"decisions": []}}') == {"routing": {"decisions": []}}


# -- the doors' answers, in process ------------------------------------------------------------

HOSTILE: dict[str, bytes] = {
    "deep": b'{"model":"MoM","messages":[{"role":"user","content":"hi"}],"x":'
    + nested(50_000).encode()
    + b"}",
    "surrogate": b'{"model":"MoM","messages":[{"role":"user","content":"a \\ud800 b"}]}',
    "huge number": b'{"model":"MoM","messages":[{"role":"user","content":"hi"}],"temperature":1e400}',
}


def limited(max_body_bytes: int = 4 * 1024 * 1024, max_json_depth: int = DEFAULT_MAX_DEPTH) -> Harness:
    document: dict[str, Any] = base_document()
    services = document.setdefault("global", {}).setdefault("services", {})
    services["data_plane"] = {"max_body_bytes": max_body_bytes, "max_json_depth": max_json_depth}
    return Harness(document)


@pytest.mark.parametrize("body", list(HOSTILE))
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_the_data_plane_answers_400_in_its_error_body(body: str, path: str) -> None:
    async with limited().client() as api:
        answer = await api.post(path, content=HOSTILE[body], headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_json", error


@pytest.mark.parametrize("body", list(HOSTILE))
@pytest.mark.parametrize(
    "path", ["/api/v1/routing/preview", "/api/v1/config/plan", "/api/v1/diagnostics/classify/intent"]
)
async def test_management_answers_400_invalid_input(body: str, path: str) -> None:
    async with limited().client() as api:
        answer = await api.post(path, content=HOSTILE[body], headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "INVALID_INPUT"


async def test_the_configured_depth_applies_to_every_door_and_a_big_body_is_413() -> None:
    chat = {"model": "MoM", "messages": [{"role": "user", "content": "hi"}]}
    deep_chat = json.dumps({**chat, "x": json.loads(nested(17))}).encode()
    deep_preview = json.dumps(
        {**chat, "preview_context": {"headers": {}}, "x": json.loads(nested(17))}
    ).encode()
    async with limited(max_body_bytes=2048, max_json_depth=16).client() as api:
        answer = await api.post("/v1/chat/completions", content=deep_chat)
        assert answer.status_code == 400 and "deeper than 16 levels" in answer.json()["error"]["message"]
        answer = await api.post("/api/v1/routing/preview", content=deep_preview)
        assert answer.status_code == 400 and "deeper than 16 levels" in answer.json()["error"]["message"]
        big = json.dumps({**chat, "messages": [{"role": "user", "content": "w " * 2000}]}).encode()
        answer = await api.post("/v1/chat/completions", content=big)
        assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"


async def test_the_configuration_validate_route_judges_a_deep_document() -> None:
    async with limited().client() as api:
        answer = await api.post("/api/v1/config/validate", content=HOSTILE["deep"])
    assert answer.status_code == 200, answer.text
    assert answer.json()["valid"] is False and "deeper than" in answer.json()["reasons"][0]["message"]


async def test_the_decision_api_answers_400_in_its_own_body() -> None:
    async with limited().client() as api:
        answer = await api.post("/v1/decisions", content=b'{"questions": ' + nested(50_000).encode() + b"}")
    assert answer.status_code == 400, answer.text  # decoded before the (absent) model is asked
    assert set(answer.json()["error"]) == {"code", "message"}
