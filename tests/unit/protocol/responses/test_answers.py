"""A Responses answer's two shapes behind one interface (protocol/responses/answers.py):
text or output items, the same deltas give the same events however they are read: whole,
resumed after any event N (exactly the whole stream's events above N), or replayed from
what the store keeps."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.protocol.responses.test_events import TIMING, USAGE, shape
from tokenpipe.errors import EngineError
from tokenpipe.protocol.responses.answers import NOTHING, answer_of, kept, replay
from tokenpipe.protocol.responses.events import failure_event
from tokenpipe.protocol.responses.objects import ResponseShape
from tokenpipe.types import Delta, Failed, Finished, FinishReason

TEXT = [Delta(0, "Hel"), Delta(1, "lo 🎉"), Delta(2, "\n")]
ITEMS = [Delta(0, "Let me look. "),
         Delta(1, '{"city": ', "tool_call", 0, "call_1", "weather"),
         Delta(2, '"Paris"}', "tool_call", 0)]

THOUGHT = [Delta(0, "First, ", "reasoning"), Delta(1, "think.", "reasoning"),
           Delta(2, "The answer.")]


def numbers(raw: bytes) -> list[int]:
    return [json.loads(line[6:])["sequence_number"] for line in raw.decode().split("\n")
            if line.startswith("data: ")]


def stream(of: ResponseShape, items: bool, deltas: list[Delta], end: Finished | Failed,
           after: int = -1, final: dict[str, Any] | None = None
           ) -> tuple[bytes, dict[str, Any], int]:
    answer = answer_of(of, items, after)
    out = [answer.opening(), *(answer.feed(d) for d in deltas)]
    final = final or answer.final(end)
    error = failure_event(end.error) if isinstance(end, Failed) else None
    out.append(answer.closing(final, error))
    return b"".join(out), final, answer.count


@pytest.mark.parametrize(("items", "deltas"), [(False, TEXT), (True, ITEMS),
                                               (True, THOUGHT)])
@pytest.mark.parametrize("end", [Finished(FinishReason.STOP, USAGE, TIMING),
                                 Failed(EngineError("broke"), USAGE)])
def test_a_resumed_or_replayed_stream_says_exactly_the_whole_streams_events_after_n(
        items: bool, deltas: list[Delta], end: Finished | Failed) -> None:
    of = shape(background=True, store=True)
    whole, final, count = stream(of, items, deltas, end)
    assert numbers(whole) == list(range(count))  # each event's number is its place
    error = failure_event(end.error) if isinstance(end, Failed) else None
    stored = kept(deltas, items, of.message_id, error)
    for after in range(-1, count + 1):
        resumed, _, _ = stream(of, items, deltas, end, after, final)
        above = b"".join(event for event in _events(whole) if numbers(event)[0] > after)
        assert resumed == above
        replayed, last = replay(final, stored, after)
        assert replayed == above and last == count - 1


def test_a_thinking_section_is_a_reasoning_item_before_the_message() -> None:
    raw, final, _ = stream(shape(), True, THOUGHT, Finished(FinishReason.STOP, USAGE, TIMING))
    thought, message = final["output"]
    assert (thought["type"], thought["summary"], thought["content"]) == (
        "reasoning", [], [{"type": "reasoning_text", "text": "First, think."}])
    assert thought["id"].startswith("rs_") and thought["status"] == "completed"
    assert message["content"][0]["text"] == "The answer."
    kinds = [json.loads(line[6:])["type"] for line in raw.decode().split("\n")
             if line.startswith("data: ")]
    assert kinds[2:8] == ["response.output_item.added", "response.reasoning_text.delta",
                          "response.reasoning_text.delta", "response.reasoning_text.done",
                          "response.output_item.done", "response.output_item.added"]


def test_an_answer_that_says_nothing_still_counts() -> None:
    answer = answer_of(shape(), False, NOTHING)
    assert answer.opening() == b"" and answer.feed(TEXT[0]) == b""
    assert answer.count == 5  # 4 opening events and one delta
    assert answer.output()[0]["content"][0]["text"] == "Hel"


def _events(raw: bytes) -> list[bytes]:
    return [block + b"\n\n" for block in raw.split(b"\n\n") if block]
