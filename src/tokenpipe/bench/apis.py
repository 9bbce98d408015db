"""The HTTP doors the bench drives, one table: per API the request (path and body) and the
parser of its stream, which says when a piece of text arrived, how many tokens the server
counted (its own usage, as every door reports it) and whether the stream failed. The load
loop around them is one (sse_load.py).

    sse        POST /v1/chat/completions  SSE: choices[].delta content or tool_calls;
                                          usage.completion_tokens (stream_options)
    anthropic  POST /v1/messages          SSE: content_block_delta text_delta;
                                          message_delta usage.output_tokens; `error`
    responses  POST /v1/responses         SSE: response.output_text.delta;
                                          response.completed|incomplete usage.output_tokens;
                                          `error`, response.failed
    ollama     POST /api/chat             NDJSON: message.content; the done
                                          line's eval_count; a line {"error": ...}

Only `sse` takes --json-schema and --tools (OpenAI's shapes), so only its parser counts
tool calls as text.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..http import SSEDecoder
from .results import StreamResult

Body = dict[str, Any]


class _SSEParser:
    """Bytes of an SSE stream in, the result updated per event (`_event`)."""

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self._decoder = SSEDecoder()

    def feed(self, raw: bytes) -> None:
        for event in self._decoder.feed(raw):
            self._event(event.event, event.data)

    def _event(self, name: str, data: str) -> None:
        raise NotImplementedError

    def _failed(self, error: Any) -> None:
        if self.result.error is None:
            self.result.error = f"stream error: {json.dumps(error)[:200]}"


class ChatParser(_SSEParser):
    """Chat Completions chunks (`data:` only; `[DONE]` ends them)."""

    def _event(self, name: str, data: str) -> None:
        if not data.startswith("{"):  # [DONE]
            return
        chunk = json.loads(data)
        if chunk.get("usage"):
            self.result.tokens = chunk["usage"]["completion_tokens"]
        if "error" in chunk:
            self._failed(chunk["error"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("tool_calls"):
                self.result.arrived()


class MessagesParser(_SSEParser):
    """Anthropic's named events; only three of them carry what the bench counts."""

    def _event(self, name: str, data: str) -> None:
        if name == "content_block_delta":
            delta = json.loads(data)["delta"]
            if delta.get("text"):  # a thinking_delta is not the answer, as on Chat's
                self.result.arrived()
        elif name == "message_delta":
            self.result.tokens = json.loads(data)["usage"]["output_tokens"]
        elif name == "error":
            self._failed(json.loads(data).get("error"))


class ResponsesParser(_SSEParser):
    """The Responses API's semantic events; the terminal one carries the usage."""

    def _event(self, name: str, data: str) -> None:
        if name == "response.output_text.delta":
            if json.loads(data).get("delta"):
                self.result.arrived()
        elif name in ("response.completed", "response.incomplete"):
            usage = json.loads(data)["response"].get("usage") or {}
            self.result.tokens = usage.get("output_tokens", 0)
        elif name == "error":  # the error itself is the event (code, message)
            self._failed(json.loads(data))
        elif name == "response.failed":
            self._failed(json.loads(data)["response"].get("error"))


class OllamaParser:
    """Ollama's NDJSON: one object a line, split anywhere by the network."""

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self._tail = b""

    def feed(self, raw: bytes) -> None:
        *lines, self._tail = (self._tail + raw).split(b"\n")
        for line in lines:
            if line.strip():
                self._line(json.loads(line))

    def _line(self, obj: dict[str, Any]) -> None:
        if "error" in obj:
            if self.result.error is None:
                self.result.error = f"stream error: {json.dumps(obj['error'])[:200]}"
            return
        message = obj.get("message") or {}
        if message.get("content"):  # `thinking` is not the answer, as on Chat's
            self.result.arrived()
        if obj.get("done"):
            self.result.tokens = obj.get("eval_count", 0)


def _chat(args: argparse.Namespace, messages: list[dict[str, str]]) -> Body:
    body: Body = {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0.0,
                  "stream": True, "stream_options": {"include_usage": True}}
    if getattr(args, "resumable", False):
        body["resumable"] = True
    if getattr(args, "response_format", None) is not None:
        body["response_format"] = args.response_format
    if getattr(args, "tool_list", None) is not None:
        body.update(tools=args.tool_list, tool_choice="required")
    return body


def _messages(args: argparse.Namespace, messages: list[dict[str, str]]) -> Body:
    return {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0.0,
            "stream": True}


def _responses(args: argparse.Namespace, messages: list[dict[str, str]]) -> Body:
    # store false: the Chat Completions request it is compared with stores nothing either
    return {"input": messages, "max_output_tokens": args.max_tokens, "temperature": 0.0,
            "stream": True, "store": False}


def _ollama(args: argparse.Namespace, messages: list[dict[str, str]]) -> Body:
    return {"messages": messages, "stream": True,
            "options": {"num_predict": args.max_tokens, "temperature": 0.0}}


@dataclass(frozen=True)
class Api:
    path: str  # the generation's POST
    probe: str  # the GET that opens the connection before the clock starts
    body: Callable[[argparse.Namespace, list[dict[str, str]]], Body]
    parser: Callable[[StreamResult], _SSEParser | OllamaParser]
    model_required: bool = False  # Ollama's: the probe's first listed model when no --model


APIS: dict[str, Api] = {
    "sse": Api("/v1/chat/completions", "/v1/models", _chat, ChatParser),
    "anthropic": Api("/v1/messages", "/v1/models", _messages, MessagesParser),
    "responses": Api("/v1/responses", "/v1/models", _responses, ResponsesParser),
    "ollama": Api("/api/chat", "/api/tags", _ollama, OllamaParser, model_required=True),
}


def listed_model(probe: bytes) -> str | None:
    """The first model of /api/tags' answer (Ollama's list), or None."""
    try:
        models = json.loads(probe).get("models") or []
        return str(models[0]["name"]) if models else None
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
