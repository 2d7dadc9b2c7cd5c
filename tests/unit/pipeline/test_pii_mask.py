"""PII mask and restore (app/pipeline/pii_mask.py): stable placeholders, the body masked
everywhere the model reads, answers restored whole and streamed, split placeholders included."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.pipeline.pii_mask import (
    StreamRestorer,
    TextRestorer,
    build_mask,
    mask_body,
    mask_text,
    restore_completion,
    restore_text,
)
from app.upstream.sse import SSEParser, StreamAccumulator

EMAIL, PHONE, OTHER = "ana.lopez@example.org", "+1 415 555 0134", "bo@example.net"


def mask_of() -> Any:
    return build_mask(
        [
            ("EMAIL_ADDRESS", EMAIL),
            ("PHONE_NUMBER", PHONE),
            ("EMAIL_ADDRESS", OTHER),
            ("EMAIL_ADDRESS", EMAIL),
        ]
    )


def test_the_same_value_is_the_same_placeholder_numbered_per_type() -> None:
    mask = mask_of()
    assert mask.originals == {
        "<EMAIL_ADDRESS_1>": EMAIL,
        "<PHONE_NUMBER_1>": PHONE,
        "<EMAIL_ADDRESS_2>": OTHER,
    }
    text = f"write to {EMAIL} or {OTHER}, again {EMAIL}, call {PHONE}"
    masked = mask_text(text, mask)
    assert (
        masked
        == "write to <EMAIL_ADDRESS_1> or <EMAIL_ADDRESS_2>, again <EMAIL_ADDRESS_1>, call <PHONE_NUMBER_1>"
    )
    assert restore_text(masked, mask) == text


def test_the_mask_never_prints_an_original() -> None:
    mask = mask_of()
    shown = repr(mask) + str(mask) + json.dumps(mask.model_dump()) + mask.model_dump_json()
    assert EMAIL not in shown and PHONE not in shown and OTHER not in shown
    assert "<EMAIL_ADDRESS_1>" in shown


def test_the_body_is_masked_wherever_the_model_reads_and_the_callers_messages_are_kept() -> None:
    mask = mask_of()
    messages = [
        {"role": "system", "content": "Help the user."},
        {"role": "user", "content": [{"type": "text", "text": f"mail {EMAIL}"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "send", "arguments": json.dumps({"to": EMAIL})}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": f"sent to {EMAIL}; reply from {OTHER}"},
        {"role": "user", "content": f"now call {PHONE}"},
    ]  # fmt: skip
    caller = {"model": "MoM", "messages": messages}
    body = dict(caller)  # the plan's shallow copy
    mask_body(body, mask)
    dumped = json.dumps(body)
    assert EMAIL not in dumped and PHONE not in dumped and OTHER not in dumped
    assert "<EMAIL_ADDRESS_1>" in body["messages"][1]["content"][0]["text"]
    assert "<EMAIL_ADDRESS_1>" in body["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert body["messages"][4]["content"] == "now call <PHONE_NUMBER_1>"
    assert EMAIL in json.dumps(caller)  # the client's own messages are untouched


def test_a_whole_answer_is_restored_in_a_copy() -> None:
    mask = mask_of()
    payload = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "I wrote to <EMAIL_ADDRESS_1>."}}
        ]
    }
    restored = restore_completion(payload, mask)
    assert restored["choices"][0]["message"]["content"] == f"I wrote to {EMAIL}."
    assert payload["choices"][0]["message"]["content"] == "I wrote to <EMAIL_ADDRESS_1>."


def test_an_unknown_placeholder_like_text_is_left_as_it_is() -> None:
    assert restore_text("see <EMAIL_ADDRESS_9> and <b>", mask_of()) == "see <EMAIL_ADDRESS_9> and <b>"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11])
def test_a_placeholder_split_anywhere_is_restored(size: int) -> None:
    mask = mask_of()
    masked = "Dear <EMAIL_ADDRESS_1>, call <PHONE_NUMBER_1> <3 or <EMAIL_ADDRESS_2>"
    restorer = TextRestorer(mask)
    out = "".join(restorer.feed(masked[i : i + size]) for i in range(0, len(masked), size)) + restorer.flush()
    assert out == f"Dear {EMAIL}, call {PHONE} <3 or {OTHER}"


def test_text_that_cannot_start_a_placeholder_is_not_held_back() -> None:
    restorer = TextRestorer(mask_of())
    assert restorer.feed("a < b and <x") == "a < b and <x"
    assert restorer.feed("then <EMAIL") == "then "
    assert restorer.feed("_ADDRESS_1> ok") == f"{EMAIL} ok"


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


def streamed_text(raw: bytes) -> tuple[str, int]:
    accumulator = StreamAccumulator()
    events = SSEParser().feed(raw)
    for event in events:
        accumulator.add(event)
    return accumulator.content, sum(e.is_done for e in events)


@pytest.mark.parametrize("cut", [1, 4, 9, 17])
def test_a_stream_is_restored_across_chunks_and_byte_splits(cut: int) -> None:
    mask = mask_of()
    text = "Write to <EMAIL_ADDRESS_1> or ring <PHONE_NUMBER_1>."
    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": text[i : i + cut]}) for i in range(0, len(text), cut)]
    frames += [chunk({}, "stop"), b"data: [DONE]\n\n"]
    wire = b"".join(frames)
    restorer = StreamRestorer(mask)
    out = b"".join(restorer.feed(wire[i : i + 13]) for i in range(0, len(wire), 13)) + restorer.finish()
    content, done = streamed_text(out)
    assert content == f"Write to {EMAIL} or ring {PHONE}."
    assert done == 1


def test_held_text_without_a_finish_reason_is_released_before_done() -> None:
    restorer = StreamRestorer(mask_of())
    out = restorer.feed(chunk({"content": "to <EMAIL_ADD"}) + b"data: [DONE]\n\n")
    content, done = streamed_text(out)
    assert content == "to <EMAIL_ADD" and done == 1
    assert out.endswith(b"data: [DONE]\n\n")


def test_the_mask_crosses_a_ray_hop_with_the_plan() -> None:
    # The Router hands the plan to the front door over a handle (cloudpickle): the originals go
    # with it, though no dump of the plan shows them.
    from ray import cloudpickle

    from app.pipeline.plan import RoutePlan

    plan = RoutePlan(request_id="r", requested_model="MoM", auto=True, pii_mask=mask_of())
    crossed = cloudpickle.loads(cloudpickle.dumps(plan))
    assert crossed.pii_mask is not None and crossed.pii_mask.originals == mask_of().originals
    assert EMAIL not in plan.model_dump_json()
