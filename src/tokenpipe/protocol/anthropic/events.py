"""The Anthropic objects of one answer, whole or as named SSE events in Anthropic's order:
message_start, content_block_start, ping, then per block content_block_delta... and
content_block_stop, then message_delta, message_stop; or an `error` event once the stream
began. Blocks follow the session's channels in order: `thinking` (reasoning), `text`
(content), one `tool_use` per call (its input streamed as `input_json_delta` fragments).
Sans-IO: bytes and dicts out, nothing sent."""

from __future__ import annotations

import json
import secrets
from typing import Any

from pydantic_core import from_json

from ...types import Delta, Finished, FinishReason, Usage
from .. import sse

_STOP_REASONS = {
    FinishReason.LENGTH: "max_tokens",  # max_tokens is required: the context cannot end it
    FinishReason.STOP: "end_turn",  # a stop sequence that ended it says so (stop_reason)
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CANCELLED: "end_turn",  # only its client, gone by then, could cancel it
}
# Not a signature: nothing here signs thinking (Anthropic's field is required, so it is "")
SIGNATURE = ""
PING = sse.event("ping", {"type": "ping"})
MESSAGE_STOP = sse.event("message_stop", {"type": "message_stop"})
# the per-token event is the hot path: its JSON around the text, joined once per token
_DELTA_HEAD = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
               b'"delta":{"type":"text_delta","text":')
_DELTA_TAIL = b"}}\n\n"
Key = tuple[str, int]  # a block: its type, and for tool_use the call's index
_TEXT: Key = ("text", 0)
_THINKING: Key = ("thinking", 0)


def stop_reason(end: Finished) -> str:
    return "stop_sequence" if end.stop_sequence is not None else _STOP_REASONS[end.reason]


def usage_json(usage: Usage) -> dict[str, int]:
    """Anthropic's meaning: input_tokens are the prompt tokens not read from the cache."""
    return {"input_tokens": usage.prompt_tokens - usage.cached_tokens,
            "output_tokens": usage.completion_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "cache_creation_input_tokens": 0}


def tool_use_id(call_id: str) -> str:
    """Anthropic's id of a call (`toolu_…`), from the core's (`call_…`)."""
    return "toolu_" + call_id.removeprefix("call_")


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's input from its argument JSON; a call max_tokens cut is read as far as it
    goes, as the SDK reads streamed fragments (jiter's partial mode)."""
    try:
        value = from_json(arguments, allow_partial=True)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _key(delta: Delta) -> Key:
    if delta.channel == "tool_call":
        return ("tool_use", delta.index)
    return _THINKING if delta.channel == "reasoning" else _TEXT


def _empty_block(delta: Delta | None) -> dict[str, Any]:
    if delta is None or delta.channel == "content":
        return {"type": "text", "text": ""}
    if delta.channel == "reasoning":
        return {"type": "thinking", "thinking": "", "signature": SIGNATURE}
    return {"type": "tool_use", "id": tool_use_id(delta.call_id or ""), "name": delta.name,
            "input": {}}


class MessageRender:
    """The objects of one answer: one message, its blocks numbered from 0 as they open."""

    def __init__(self, model: str) -> None:
        self.id = "msg_" + secrets.token_hex(12)
        self.model = model
        self._index = -1  # the open block's index (streams)
        self._open: Key | None = None
        self._call: str | None = None  # the open tool_use block's call id
        self._head = b""

    def _message(self, content: list[dict[str, Any]], reason: str | None,
                 sequence: str | None, usage: Usage) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": reason, "stop_sequence": sequence,
                "usage": usage_json(usage)}

    def opening(self, usage: Usage, first: Delta | None) -> bytes:
        """message_start (empty content; the prompt's tokens so far), the first block's
        start (`first`'s, or a text block when the answer is empty) and a ping, as
        Anthropic opens a stream."""
        start = {"type": "message_start", "message": self._message([], None, None, usage)}
        return sse.event("message_start", start) + self._start(first) + PING

    def _start(self, delta: Delta | None) -> bytes:
        self._index += 1
        self._open = _TEXT if delta is None else _key(delta)
        self._call = None if delta is None else delta.call_id
        self._head = _DELTA_HEAD % self._index
        return sse.event("content_block_start", {"type": "content_block_start",
                                                 "index": self._index,
                                                 "content_block": _empty_block(delta)})

    def _stop(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse.event("content_block_stop", {"type": "content_block_stop",
                                                "index": self._index})

    def delta(self, delta: Delta) -> bytes:
        """The delta's event, after the stop of the block before and its own block's start
        when it opens one (a new channel, or a new call)."""
        if self._open is _TEXT and delta.channel == "content" and delta.text:  # hot path
            return self._head + json.dumps(delta.text, ensure_ascii=False).encode() + (
                _DELTA_TAIL)
        out = b""
        if self._open != _key(delta) or delta.call_id not in (None, self._call):
            out = self._stop() + self._start(delta)
        if not delta.text:
            return out
        if delta.channel == "content":
            return out + self._head + json.dumps(delta.text, ensure_ascii=False).encode() + (
                _DELTA_TAIL)
        inner = ({"type": "thinking_delta", "thinking": delta.text}
                 if delta.channel == "reasoning"
                 else {"type": "input_json_delta", "partial_json": delta.text})
        return out + sse.event("content_block_delta", {
            "type": "content_block_delta", "index": self._index, "delta": inner})

    def finish(self, end: Finished) -> bytes:
        """The open block's stop, message_delta (stop reason, final usage), message_stop."""
        delta = {"type": "message_delta",
                 "delta": {"stop_reason": stop_reason(end), "stop_sequence": end.stop_sequence},
                 "usage": usage_json(end.usage)}
        return self._stop() + sse.event("message_delta", delta) + MESSAGE_STOP

    @staticmethod
    def error(body: dict[str, Any]) -> bytes:
        return sse.event("error", body)

    def whole(self, deltas: list[Delta], end: Finished) -> dict[str, Any]:
        """The message with every block, in the order a stream of it opens them."""
        blocks: list[dict[str, Any]] = []
        arguments: list[str] = []  # the tool_use blocks' argument JSON, in order
        last: Key | None = None
        for d in deltas:
            key = _key(d)
            if key != last or d.call_id is not None:
                blocks.append(_empty_block(d))
                last = key
                if d.channel == "tool_call":
                    arguments.append("")
            block = blocks[-1]
            if d.channel == "tool_call":
                arguments[-1] += d.text
            else:
                block[block["type"]] += d.text  # the "text" or "thinking" field
        calls = iter(arguments)
        for block in blocks:
            if block["type"] == "tool_use":
                block["input"] = tool_input(next(calls))
        return self._message(blocks or [_empty_block(None)], stop_reason(end),
                             end.stop_sequence, end.usage)
