"""The Anthropic objects of one answer, whole or as named SSE events in Anthropic's order:
message_start, content_block_start (index 0), ping, content_block_delta..., content_block_stop,
message_delta, message_stop; or an `error` event once the stream began. Sans-IO: bytes and
dicts out, nothing sent."""

from __future__ import annotations

import json
import secrets
from typing import Any

from ...types import FinishReason, Usage
from .. import sse

_STOP_REASONS = {
    FinishReason.LENGTH: "max_tokens",  # max_tokens is required: the context cannot end it
    # STOP is the model's end of turn or a stop sequence: the session does not say which,
    # nor which sequence (StopMatcher keeps it to itself), so both read end_turn.
    FinishReason.STOP: "end_turn",
    FinishReason.CANCELLED: "end_turn",  # only its client, gone by then, could cancel it
}
PING = sse.event("ping", {"type": "ping"})
BLOCK_STOP = sse.event("content_block_stop", {"type": "content_block_stop", "index": 0})
MESSAGE_STOP = sse.event("message_stop", {"type": "message_stop"})
BLOCK_START = sse.event("content_block_start", {
    "type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
# the per-token event is the hot path: its JSON around the text, joined once per token
_DELTA_HEAD = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
               b'"delta":{"type":"text_delta","text":')
_DELTA_TAIL = b"}}\n\n"


def stop_reason(reason: FinishReason) -> str:
    return _STOP_REASONS[reason]


def usage_json(usage: Usage) -> dict[str, int]:
    """Anthropic's meaning: input_tokens are the prompt tokens not read from the cache."""
    return {"input_tokens": usage.prompt_tokens - usage.cached_tokens,
            "output_tokens": usage.completion_tokens,
            "cache_read_input_tokens": usage.cached_tokens,
            "cache_creation_input_tokens": 0}


class MessageRender:
    """The objects of one answer (one message, one text block at index 0)."""

    def __init__(self, model: str) -> None:
        self.id = "msg_" + secrets.token_hex(12)
        self.model = model

    def _message(self, content: list[dict[str, Any]], reason: str | None,
                 usage: Usage) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": reason, "stop_sequence": None,
                "usage": usage_json(usage)}

    def opening(self, usage: Usage) -> bytes:
        """message_start (empty content; the prompt's tokens so far), the text block's start
        and a ping, as Anthropic opens a stream."""
        start = {"type": "message_start", "message": self._message([], None, usage)}
        return sse.event("message_start", start) + BLOCK_START + PING

    @staticmethod
    def delta(text: str) -> bytes:
        return _DELTA_HEAD + json.dumps(text, ensure_ascii=False).encode() + _DELTA_TAIL

    @staticmethod
    def finish(reason: FinishReason, usage: Usage) -> bytes:
        """The block's stop, message_delta (stop reason, final usage), message_stop."""
        delta = {"type": "message_delta",
                 "delta": {"stop_reason": stop_reason(reason), "stop_sequence": None},
                 "usage": usage_json(usage)}
        return BLOCK_STOP + sse.event("message_delta", delta) + MESSAGE_STOP

    @staticmethod
    def error(body: dict[str, Any]) -> bytes:
        return sse.event("error", body)

    def whole(self, text: str, reason: FinishReason, usage: Usage) -> dict[str, Any]:
        return self._message([{"type": "text", "text": text}], stop_reason(reason), usage)
