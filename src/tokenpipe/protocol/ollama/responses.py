"""Ollama's answers, sans-IO: the NDJSON lines of a streamed /api/chat or /api/generate
answer, the whole answer, the "load" answer, and the model listings of /api/tags,
/api/show and /api/ps. Durations are nanoseconds, as Ollama reports them.

What the server does not know about a model (its family, parameter count, quantization,
file size, digest) is left empty, Ollama's way of saying nothing: "" and 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import from_json

from ...types import FinishReason, Timing, Usage

NS_PER_MS = 1_000_000
# Ollama's `keep_alive: -1` ("forever"): its expiry is now plus the largest Go duration
FOREVER = timedelta(microseconds=(2**63 - 1) // 1000)


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 in UTC with a `Z`, as Ollama writes `created_at`."""
    return (moment or datetime.now(UTC)).isoformat(timespec="microseconds").replace(
        "+00:00", "Z")


def durations(timing: Timing) -> dict[str, int]:
    """The session's measured timing in Ollama's fields: `load_duration` is the wait for a
    place (models are loaded before they are served), `prompt_eval_duration` from the
    engine taking the request to the first token, `eval_duration` the rest."""
    first = timing.total_ms if timing.ttft_ms is None else timing.ttft_ms
    return {
        "total_duration": round(timing.total_ms * NS_PER_MS),
        "load_duration": round(timing.queue_ms * NS_PER_MS),
        "prompt_eval_duration": round(max(0.0, first - timing.queue_ms) * NS_PER_MS),
        "eval_duration": round(max(0.0, timing.total_ms - first) * NS_PER_MS),
    }


def counts(usage: Usage) -> dict[str, int]:
    return {"prompt_eval_count": usage.prompt_tokens, "eval_count": usage.completion_tokens}


def done_reason(reason: FinishReason) -> str:
    """Ollama's `done_reason`: an answer that ended with tool calls is `stop`, as Ollama's."""
    return "stop" if reason is FinishReason.TOOL_CALLS else reason.value


def call_json(name: str, arguments: str) -> dict[str, Any]:
    """One call as Ollama sends it, whole: `arguments` an object (a call max_tokens cut is
    read as far as it goes)."""
    try:
        value = from_json(arguments, allow_partial=True)
    except ValueError:
        value = {}
    return {"function": {"name": name, "arguments": value if isinstance(value, dict) else {}}}


def line(obj: dict[str, Any]) -> bytes:
    """One NDJSON line: JSON never holds a raw newline."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class Answer:
    """The objects of one answer: /api/chat's (`message`) or /api/generate's (`response`),
    for `model` as the client named it."""

    def __init__(self, model: str, *, chat: bool) -> None:
        self.model = model
        self.chat = chat
        # the per-token line is the hot path: its fixed parts joined once
        head = json.dumps(model, ensure_ascii=False).encode()
        self._before = b'{"model":' + head + b',"created_at":"'
        self._after = (b'","message":{"role":"assistant","content":' if chat
                       else b'","response":')
        self._end = b'},"done":false}\n' if chat else b',"done":false}\n'

    def delta(self, text: str, created_at: str | None = None) -> bytes:
        """One line; `created_at` may be shared by the lines written together."""
        return (self._before + (created_at or timestamp()).encode() + self._after
                + json.dumps(text, ensure_ascii=False).encode() + self._end)

    def _text(self, text: str, thinking: str = "",
              calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = calls
            return {"message": message}
        return {"response": text, "thinking": thinking} if thinking else {"response": text}

    def part(self, created_at: str, thinking: str = "",
             calls: list[dict[str, Any]] | None = None) -> bytes:
        """A line of thinking, or of whole tool calls (chat), with empty content."""
        return line({"model": self.model, "created_at": created_at,
                     **self._text("", thinking, calls), "done": False})

    def waiting(self, created_at: str, news: dict[str, Any]) -> bytes:
        """A line with no text that says how the request waits: tokenpipe's own fields
        (`news`), which Ollama's clients ignore as they ignore any unknown field."""
        return line({"model": self.model, "created_at": created_at, **self._text(""),
                     "done": False, **news})

    def done(self, text: str, reason: FinishReason, usage: Usage, timing: Timing,
             thinking: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The last line of a stream (`text` ""), or the whole answer (`text` all of it,
        its thinking and calls)."""
        return {"model": self.model, "created_at": timestamp(),
                **self._text(text, thinking, calls), "done_reason": done_reason(reason),
                "done": True, **durations(timing), **counts(usage)}

    def loaded(self) -> dict[str, Any]:
        """The answer to Ollama's "load the model" call (no prompt, no messages)."""
        return {"model": self.model, "created_at": timestamp(), **self._text(""),
                "done_reason": "load", "done": True}

    def unloaded(self) -> dict[str, Any]:
        """The answer to Ollama's "unload the model" call (keep_alive 0, nothing to say)."""
        return {"model": self.model, "created_at": timestamp(), **self._text(""),
                "done_reason": "unload", "done": True}


@dataclass(frozen=True, slots=True)
class Kind:
    """What the listings say of a model's kind, from its engine's declared capabilities."""

    gguf: bool = False  # its engine reads GGUF files only
    tools: bool = False  # its engine generates tool calls under a grammar


def details(kind: Kind) -> dict[str, Any]:
    """What this server knows of the model's kind."""
    return {"parent_model": "", "format": "gguf" if kind.gguf else "",
            "family": "", "families": None, "parameter_size": "", "quantization_level": ""}


def tag(name: str, kind: Kind, since: datetime) -> dict[str, Any]:
    """One model of /api/tags; `since`: when this server started serving it."""
    return {"name": name, "model": name, "modified_at": timestamp(since), "size": 0,
            "digest": "", "details": details(kind)}


def loaded_model(name: str, kind: Kind, context_tokens: int, expires_at: float | None,
                 *, busy: bool = False) -> dict[str, Any]:
    """One model of /api/ps; `expires_at` (a time.time()) is when its keep-alive unloads
    it, None: it stays (Ollama writes "forever" as the largest Go duration from now)."""
    until = (datetime.now(UTC) + FOREVER if expires_at is None or busy
             else datetime.fromtimestamp(expires_at, UTC))
    return {"name": name, "model": name, "size": 0, "digest": "", "details": details(kind),
            "expires_at": timestamp(until), "size_vram": 0, "context_length": context_tokens}


def shown(name: str, kind: Kind, context_tokens: int, since: datetime, *,
          embeds: bool = False, generates: bool = True, thinks: bool = False
          ) -> dict[str, Any]:
    """/api/show: what is known; the chat template is the model's own (not Ollama's Go
    template), so `template` is empty. `num_ctx` is the tokens one request may use;
    `capabilities` has "embedding" where /api/embed serves the model, "thinking" where its
    chat template has a thinking section (`think` is served: docs/protocol.md)."""
    return {
        "modelfile": f"# served by tokenpipe\nFROM {name}\nPARAMETER num_ctx {context_tokens}\n",
        "parameters": f"num_ctx {context_tokens}",
        "template": "",
        "details": details(kind),
        "model_info": {"tokenpipe.context_length": context_tokens},
        "capabilities": [*(["completion"] if generates else []),
                         *(["tools"] if kind.tools and generates else []),
                         *(["thinking"] if thinks and generates else []),
                         *(["embedding"] if embeds else [])],
        "modified_at": timestamp(since),
    }
