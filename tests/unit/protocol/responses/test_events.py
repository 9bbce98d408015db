"""The Responses objects and numbered events: every one parses, strictly, as the `openai`
SDK's own types; sequence numbers are the event's place; a stream resumed after N says
exactly what the whole stream said after N."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tokenpipe.errors import EngineError, Overloaded
from tokenpipe.protocol.responses.events import (
    OPENING,
    ResponseEvents,
    failure_event,
    last_number,
)
from tokenpipe.protocol.responses.objects import ResponseShape
from tokenpipe.protocol.responses.requests import ResponsesRequest
from tokenpipe.types import Failed, Finished, FinishReason, Timing, Usage

EVENT = TypeAdapter(ResponseStreamEvent)
USAGE = Usage(12, 3, cached_tokens=4)
TIMING = Timing(0.0, 1.0, 2.0, None)
DELTAS = ["Hel", "lo ", "wörld 🎉", "\n"]


def shape(**fields: Any) -> ResponseShape:
    body = ResponsesRequest.model_validate({"input": "hi", **fields})
    return ResponseShape.new(body, "m")


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            event = json.loads(data.removeprefix("data: "))
            assert name == "event: " + event["type"]  # the event line names its data
            out.append(event)
    return out


def whole_stream(s: ResponseShape, end: Finished | Failed, after: int = -1) -> bytes:
    events = ResponseEvents(s)
    error = failure_event(end.error) if isinstance(end, Failed) else None
    final = s.final(end, "".join(DELTAS))
    parts = [events.opening(after)]
    parts += [events.delta(i, t) for i, t in enumerate(DELTAS) if OPENING + i > after]
    parts.append(events.closing(len(DELTAS), final, error, after))
    return b"".join(parts)


@pytest.mark.parametrize(("end", "status", "terminal"), [
    (Finished(FinishReason.STOP, USAGE, TIMING), "completed", "response.completed"),
    (Finished(FinishReason.LENGTH, USAGE, TIMING), "incomplete", "response.incomplete"),
    (Finished(FinishReason.CANCELLED, USAGE, TIMING), "cancelled", "response.incomplete"),
    (Failed(EngineError("boom"), USAGE), "failed", "response.failed"),
])
def test_every_event_parses_as_the_sdks_and_is_numbered_by_place(
        end: Finished | Failed, status: str, terminal: str) -> None:
    s = shape(background=True, instructions="x", metadata={"a": "b"},
              text={"format": {"type": "json_schema", "name": "n"}})
    got = sse_events(whole_stream(s, end))
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    assert got[-1]["sequence_number"] == last_number(len(DELTAS), isinstance(end, Failed))
    for event in got:
        EVENT.validate_python(event, strict=False)
        Response.model_validate(event.get("response", got[-1]["response"]))
    assert [e["type"] for e in got[:OPENING]] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added"]
    assert got[0]["response"]["status"] == "queued"  # a background one
    deltas = [e for e in got if e["type"] == "response.output_text.delta"]
    assert [e["delta"] for e in deltas] == DELTAS
    assert got[-1]["type"] == terminal and got[-1]["response"]["status"] == status
    final = got[-1]["response"]
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 4
    assert final["usage"]["total_tokens"] == 15
    if isinstance(end, Failed):
        assert got[-2] == {"type": "error", "code": "engine_error", "message": "boom",
                           "param": None, "sequence_number": got[-2]["sequence_number"]}
        assert final["error"] == {"code": "server_error", "message": "boom"}
    else:
        assert got[-2]["item"] == final["output"][0]
        assert final["output"][0]["content"][0]["text"] == "".join(DELTAS)
    if status == "incomplete":
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}


@pytest.mark.parametrize("after", [-1, 0, 3, 4, 6, 7, 8, 10, 11])
def test_resumed_after_n_is_the_whole_streams_rest(after: int) -> None:
    s = shape()
    end = Finished(FinishReason.STOP, USAGE, TIMING)
    whole = sse_events(whole_stream(s, end))
    rest = sse_events(whole_stream(s, end, after))
    for e in whole + rest:  # completed_at may differ by the second the final was built
        e.get("response", {}).pop("completed_at", None)
    assert rest == [e for e in whole if e["sequence_number"] > after]


def test_objects_parse_strictly() -> None:
    s = shape(temperature=0, top_p=0.5, max_output_tokens=9, user="u")
    for obj in (s.snapshot("queued"), s.snapshot("in_progress", [s.message("so far",
                                                                           "in_progress")]),
                s.final(Failed(Overloaded("full"), USAGE), "")):
        Response.model_validate(obj)
    final = s.final(Finished(FinishReason.STOP, USAGE, TIMING), "all")
    parsed = Response.model_validate(final)
    assert parsed.output_text == "all" and parsed.id.startswith("resp_")
    assert parsed.output[0].id.startswith("msg_")  # type: ignore[union-attr]
    assert (parsed.temperature, parsed.top_p, parsed.max_output_tokens) == (0, 0.5, 9)
    assert s.final(Failed(Overloaded("full"), USAGE), "")["error"]["code"] == (
        "rate_limit_exceeded")
    # a stored response rebuilds the same base (its events replay the same)
    again = ResponseShape(final, s.message_id)
    assert again.snapshot("queued") == s.snapshot("queued")
