"""The Responses API's streamed events, numbered so that a resumed stream says exactly what
the first one said: `sequence_number` is a function of the event's place alone.

    0  response.created       1  response.in_progress
    2  response.output_item.added       3  response.content_part.added
    4 + seq  response.output_text.delta   (seq: the session's delta seq, 0, 1, 2, ...)
    then, after D deltas: 4+D output_text.done, 5+D content_part.done,
    6+D output_item.done, 7+D response.completed | response.incomplete (also a cancelled
    response: its status says so); or 4+D `error`, 5+D response.failed.

Every builder takes `after` and gives only the events numbered above it (a stream
resumed with `starting_after`). Sans-IO: bytes out, nothing sent."""

from __future__ import annotations

import json
from typing import Any

from ...errors import TokenpipeError
from .. import sse
from .errors import error_event
from .objects import ResponseShape

OPENING = 4  # events before the first delta
_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete",
             "cancelled": "response.incomplete", "failed": "response.failed"}


def last_number(deltas: int, failed: bool) -> int:
    """The sequence number of a finished stream's last event."""
    return OPENING + deltas + (1 if failed else 3)


class ResponseEvents:
    """The event stream of one response."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        item = json.dumps(shape.message_id).encode()
        # the per-token event is the hot path: its JSON around the text, joined per token
        self._head = (b'event: response.output_text.delta\ndata: {"type":'
                      b'"response.output_text.delta","item_id":' + item +
                      b',"output_index":0,"content_index":0,"delta":')

    def _event(self, number: int, obj: dict[str, Any]) -> bytes:
        obj["sequence_number"] = number
        return sse.event(obj["type"], obj)

    def opening(self, after: int = -1) -> bytes:
        shape = self.shape
        first = "queued" if shape.base["background"] else "in_progress"
        where = {"item_id": shape.message_id, "output_index": 0, "content_index": 0}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": shape.snapshot(first)},
            {"type": "response.in_progress", "response": shape.snapshot("in_progress")},
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**shape.message("", "in_progress"), "content": []}},
            {"type": "response.content_part.added", **where, "part": shape.part("")},
        ]
        return b"".join(self._event(n, e) for n, e in enumerate(events) if n > after)

    def delta(self, seq: int, text: str) -> bytes:
        return (self._head + json.dumps(text, ensure_ascii=False).encode() +
                b',"logprobs":[],"sequence_number":' + str(OPENING + seq).encode() + b"}\n\n")

    def closing(self, deltas: int, final: dict[str, Any], error: dict[str, Any] | None = None,
                after: int = -1) -> bytes:
        """The events after the last of `deltas` deltas; `final` is shape.final(...), and
        `error` (failure_event()) the failure of a failed one."""
        n = OPENING + deltas
        terminal = {"type": _TERMINAL[final["status"]], "response": final}
        if error is not None:
            events = [dict(error), terminal]
        else:
            item = final["output"][0]
            text = item["content"][0]["text"]
            where = {"item_id": self.shape.message_id, "output_index": 0, "content_index": 0}
            events = [
                {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
                {"type": "response.content_part.done", **where, "part": self.shape.part(text)},
                {"type": "response.output_item.done", "output_index": 0, "item": item},
                terminal,
            ]
        return b"".join(self._event(n + i, e) for i, e in enumerate(events) if n + i > after)


def failure_event(exc: TokenpipeError) -> dict[str, Any]:
    """A failure's `error` event, unnumbered (kept with a stored background response)."""
    event = error_event(exc, 0)
    del event["sequence_number"]
    return event
