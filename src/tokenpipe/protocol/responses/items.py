"""The output items of an answer to a request with tools or reasoning, as its deltas
arrive: the answer may be a thinking section (a `reasoning` item, first), text (a `message`
item), calls (one `function_call` item each) or, through an upstream, both. Sans-IO: `feed`
and `close` give the stream's events (unnumbered) and `output` is the response object's
`output`, the same items whole or streamed.

    response.output_item.added (function_call, arguments "")
    response.function_call_arguments.delta ...
    response.function_call_arguments.done (name, arguments)
    response.output_item.done (function_call, completed)

A text item streams as it does without tools (output_item.added, content_part.added,
output_text.delta ..., output_text.done, content_part.done, output_item.done); a reasoning
item as OpenAI streams its reasoning text (output_item.added, reasoning_text.delta ...,
reasoning_text.done, output_item.done), `summary` empty (none is written). An item is
done when the next one begins or the answer ends. Item ids follow from the response's and
the item's place, so the same deltas give the same events (a background stream resumed,
or replayed from the store)."""

from __future__ import annotations

from typing import Any

from ...types import Delta
from .. import sse
from .objects import ResponseShape


class OutputItems:
    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.output: list[dict[str, Any]] = []  # every item so far, the open one last
        self._open: dict[str, Any] | None = None
        self._calls: dict[int, dict[str, Any]] = {}  # by the delta's call index

    def feed(self, delta: Delta) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if delta.channel == "tool_call":
            call = self._calls.get(delta.index)
            if call is None or (delta.call_id is not None and call["call_id"] != delta.call_id):
                call = self._call(delta, events)
            if delta.text:
                call["arguments"] += delta.text
                events.append({"type": "response.function_call_arguments.delta",
                               **self._where(call), "delta": delta.text})
        elif delta.channel == "content" and delta.text:
            message = self._open if self._open is not None and (
                self._open["type"] == "message") else self._message(events)
            part = message["content"][0]
            part["text"] += delta.text
            events.append({"type": "response.output_text.delta", **self._where(message),
                           "content_index": 0, "delta": delta.text, "logprobs": []})
        elif delta.channel == "reasoning" and delta.text:
            thought = self._open if self._open is not None and (
                self._open["type"] == "reasoning") else self._reasoning(events)
            thought["content"][0]["text"] += delta.text
            events.append({"type": "response.reasoning_text.delta", **self._where(thought),
                           "content_index": 0, "delta": delta.text})
        return events

    def close(self, status: str) -> list[dict[str, Any]]:
        """The answer ended (`status`: completed or incomplete): the open item is done; an
        answer with no item at all gets an empty message, as one without tools does."""
        events: list[dict[str, Any]] = []
        if not self.output:
            self._message(events)
        events += self._done(status)
        return events

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [item for item in self.output if item["type"] == "function_call"]

    # ---- internals ----------------------------------------------------------------------
    def _item_id(self, prefix: str) -> str:
        """An item's id from the response's and the item's place: the same on a replay."""
        return f"{prefix}_{self.shape.message_id.removeprefix('msg_')}_{len(self.output)}"

    def _where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self.output.index(item)}

    def _begin(self, item: dict[str, Any], events: list[dict[str, Any]]) -> None:
        events += self._done("completed")
        self.output.append(item)
        self._open = item
        added = {**item, "content": []} if item["type"] != "function_call" else dict(item)
        events.append({"type": "response.output_item.added",
                       "output_index": len(self.output) - 1, "item": added})

    def _message(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        first = not any(item["type"] == "message" for item in self.output)
        item_id = self.shape.message_id if first else self._item_id("msg")
        message = {"id": item_id, "type": "message", "role": "assistant",
                   "status": "in_progress", "content": [self.shape.part("")]}
        self._begin(message, events)
        events.append({"type": "response.content_part.added", **self._where(message),
                       "content_index": 0, "part": self.shape.part("")})
        return message

    def _reasoning(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        thought = {"id": self._item_id("rs"), "type": "reasoning", "status": "in_progress",
                   "summary": [], "content": [{"type": "reasoning_text", "text": ""}]}
        self._begin(thought, events)
        return thought

    def _call(self, delta: Delta, events: list[dict[str, Any]]) -> dict[str, Any]:
        call = {"id": self._item_id("fc"), "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": delta.call_id or self._item_id("call"),
                "name": delta.name or ""}
        self._calls[delta.index] = call
        self._begin(call, events)
        return call

    def _done(self, status: str) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        item["status"] = status
        where = self._where(item)
        if item["type"] == "message":
            part = dict(item["content"][0])
            return [{"type": "response.output_text.done", **where, "content_index": 0,
                     "text": part["text"], "logprobs": []},
                    {"type": "response.content_part.done", **where, "content_index": 0,
                     "part": part},
                    {"type": "response.output_item.done", "output_index": where[
                        "output_index"], "item": _copy(item)}]
        if item["type"] == "reasoning":
            return [{"type": "response.reasoning_text.done", **where, "content_index": 0,
                     "text": item["content"][0]["text"]},
                    {"type": "response.output_item.done", "output_index": where[
                        "output_index"], "item": _copy(item)}]
        return [{"type": "response.function_call_arguments.done", **where,
                 "name": item["name"], "arguments": item["arguments"]},
                {"type": "response.output_item.done", "output_index": where["output_index"],
                 "item": _copy(item)}]


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    out = dict(item)
    if "content" in out:
        out["content"] = [dict(part) for part in out["content"]]
    return out


_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete",
             "cancelled": "response.incomplete", "failed": "response.failed"}


def opening_events(shape: ResponseShape) -> list[dict[str, Any]]:
    """response.created (queued in the background) and response.in_progress."""
    first = "queued" if shape.base["background"] else "in_progress"
    return [{"type": "response.created", "response": shape.snapshot(first)},
            {"type": "response.in_progress", "response": shape.snapshot("in_progress")}]


def closing_events(items: OutputItems, status: str) -> list[dict[str, Any]]:
    """The answer ended with `status` (status_of): the open item is done."""
    return items.close("completed" if status == "completed" else "incomplete")


def terminal_events(final: dict[str, Any], error: dict[str, Any] | None
                    ) -> list[dict[str, Any]]:
    """The failure's `error` event if it failed, then the terminal event with `final` (the
    response as it ended, its items closed)."""
    events = [dict(error)] if error is not None else []
    events.append({"type": _TERMINAL[final["status"]], "response": final})
    return events


class Numbered:
    """Events numbered 0, 1, ... in order, as SSE; those numbered `after` or below are
    counted and left out (a stream resumed after them)."""

    def __init__(self, after: int = -1) -> None:
        self.after = after
        self.count = 0

    def sse(self, events: list[dict[str, Any]]) -> bytes:
        out = []
        for event in events:
            if self.count > self.after:
                event["sequence_number"] = self.count
                out.append(sse.event(event["type"], event))
            self.count += 1
        return b"".join(out)
