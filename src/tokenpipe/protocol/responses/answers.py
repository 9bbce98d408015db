"""What a Responses answer is made of, as one interface over its two shapes: one message's
text (events.py), or output items, with tools or reasoning (items.py). A door feeds the session's
deltas in and gets the stream's events out, numbered so that a stream resumed after event
`after` says exactly what the first one said from there; the same answer gives the
response object as it ended and, fed a stored stream's deltas, replays it.

Sans-IO: bytes out, nothing sent. A delta is fed once, in order, from the first."""

from __future__ import annotations

from typing import Any, Protocol

from ...types import Delta, Failed, Finished
from .events import OPENING, ResponseEvents
from .items import Numbered, OutputItems, closing_events, opening_events, terminal_events
from .objects import ResponseShape, status_of

NOTHING = 10**18  # an `after` beyond any stream: the answer counts its events, says none


class Answer(Protocol):
    def opening(self) -> bytes:
        """The events before the first delta."""
        ...

    def feed(self, delta: Delta) -> bytes:
        """The events of the next delta."""
        ...

    def add(self, delta: Delta) -> None:
        """The next delta, for a whole answer (no events)."""

    def final(self, end: Finished | Failed) -> dict[str, Any]:
        """The response as it ended, of the deltas fed."""
        ...

    def closing(self, final: dict[str, Any], error: dict[str, Any] | None) -> bytes:
        """The events after the last delta: `final` is the response as it ended (final()),
        `error` the failure's error event (events.failure_event) when it failed."""
        ...

    def output(self) -> list[dict[str, Any]]:
        """The response's output while it runs."""
        ...

    def text(self) -> str:
        """The answer's message text (what a stored conversation keeps)."""
        ...

    @property
    def count(self) -> int:
        """How many events the answer has numbered so far (said or not)."""
        ...


class TextAnswer:
    """One message's text: the delta of seq s is event OPENING + s."""

    def __init__(self, shape: ResponseShape, after: int = -1) -> None:
        self.shape = shape
        self.after = after
        self.events = ResponseEvents(shape)
        self.parts: list[str] = []
        self._closed = 0  # the closing events' count, once said

    def opening(self) -> bytes:
        return self.events.opening(self.after)

    def feed(self, delta: Delta) -> bytes:
        self.parts.append(delta.text)
        if OPENING + delta.seq > self.after:
            return self.events.delta(delta.seq, delta.text)
        return b""

    def add(self, delta: Delta) -> None:
        self.parts.append(delta.text)

    def final(self, end: Finished | Failed) -> dict[str, Any]:
        return self.shape.final(end, "".join(self.parts))

    def closing(self, final: dict[str, Any], error: dict[str, Any] | None) -> bytes:
        self._closed = 2 if error is not None else 4
        return self.events.closing(len(self.parts), final, error, self.after)

    def output(self) -> list[dict[str, Any]]:
        text = "".join(self.parts)
        return [self.shape.message(text, "in_progress")] if text else []

    def text(self) -> str:
        return "".join(self.parts)

    @property
    def count(self) -> int:
        return OPENING + len(self.parts) + self._closed


class ItemsAnswer:
    """Output items (reasoning, a message, function calls), their events numbered in order:
    a stream resumed rebuilds them from the first delta."""

    def __init__(self, shape: ResponseShape, after: int = -1) -> None:
        self.shape = shape
        self.items = OutputItems(shape)
        self.numbered = Numbered(after)
        self._closing: list[dict[str, Any]] | None = None  # the open item's done events

    def opening(self) -> bytes:
        return self.numbered.sse(opening_events(self.shape))

    def feed(self, delta: Delta) -> bytes:
        return self.numbered.sse(self.items.feed(delta))

    def add(self, delta: Delta) -> None:
        self.items.feed(delta)

    def _close(self, status: str) -> list[dict[str, Any]]:
        if self._closing is None:
            self._closing = closing_events(self.items, status)
        return self._closing

    def final(self, end: Finished | Failed) -> dict[str, Any]:
        self._close(status_of(end))
        return self.shape.final(end, "", self.items.output)

    def closing(self, final: dict[str, Any], error: dict[str, Any] | None) -> bytes:
        return self.numbered.sse(self._close(final["status"]) + terminal_events(final, error))

    def output(self) -> list[dict[str, Any]]:
        return self.items.output

    def text(self) -> str:
        return "".join(i["content"][0]["text"] for i in self.items.output
                       if i["type"] == "message")

    @property
    def count(self) -> int:
        return self.numbered.count


def answer_of(shape: ResponseShape, items: bool, after: int = -1) -> Answer:
    """The answer of a request with tools or reasoning (`items`) or without, its events
    above `after`."""
    return ItemsAnswer(shape, after) if items else TextAnswer(shape, after)


def kept(deltas: list[Delta], items: bool, message_id: str,
         error: dict[str, Any] | None) -> dict[str, Any]:
    """A background response's stream as the store keeps it, to replay after a restart:
    the deltas' text, and with items their channel and call too."""
    if not items:
        return {"message_id": message_id, "deltas": [d.text for d in deltas], "error": error}
    return {"message_id": message_id, "items": True, "error": error,
            "deltas": [[d.text, d.channel, d.index, d.call_id, d.name] for d in deltas]}


def replay(response: dict[str, Any], stream: dict[str, Any], after: int) -> tuple[bytes, int]:
    """A stored background response's events numbered above `after`, as first sent, and
    the number of its last event."""
    items = bool(stream.get("items"))
    answer = answer_of(ResponseShape(response, stream["message_id"]), items, after)
    out = [answer.opening()]
    for seq, entry in enumerate(stream["deltas"]):
        delta = Delta(seq, *entry) if items else Delta(seq, entry)
        out.append(answer.feed(delta))
    out.append(answer.closing(response, stream["error"]))
    return b"".join(out), answer.count - 1
