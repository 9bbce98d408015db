"""The Responses API's objects as plain dicts (what OpenAI's SDK parses as `Response`,
`ResponseOutputMessage`, `ResponseUsage`): a response's fixed part (id, the request's
settings echoed) is built once; its status, output and usage are filled in per snapshot."""

from __future__ import annotations

import secrets
import time
from typing import Any

from ...types import Failed, Finished, FinishReason, Usage
from .errors import failure
from .requests import ResponsesRequest

_STATUS = {FinishReason.STOP: "completed", FinishReason.TOOL_CALLS: "completed",
           FinishReason.LENGTH: "incomplete", FinishReason.CANCELLED: "cancelled"}
# filled per snapshot, not part of the fixed base
_LIVE = ("status", "output", "usage", "error", "incomplete_details", "completed_at")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def usage_json(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens,
                                     "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.total_tokens}


def status_of(end: Finished | Failed) -> str:
    return "failed" if isinstance(end, Failed) else _STATUS[end.reason]


def _text_echo(body: ResponsesRequest) -> dict[str, Any]:
    fmt = body.text.format if body.text is not None else None
    if fmt is None:
        return {"format": {"type": "text"}}
    echo = fmt.model_dump(by_alias=True, exclude_none=True)
    if fmt.type == "json_schema":
        echo.setdefault("schema", {})
    return {"format": echo}


class ResponseShape:
    """One response's objects: `base` holds what never changes (id, model, settings)."""

    def __init__(self, base: dict[str, Any], message_id: str) -> None:
        self.base = {k: v for k, v in base.items() if k not in _LIVE}
        self.message_id = message_id

    @classmethod
    def new(cls, body: ResponsesRequest, model: str) -> ResponseShape:
        base = {
            "id": new_id("resp"), "object": "response", "created_at": int(time.time()),
            "background": bool(body.background), "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens, "max_tool_calls": None,
            "metadata": body.metadata or {}, "model": model,
            "parallel_tool_calls": body.parallel_tool_calls is True,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": body.reasoning.effort if body.reasoning else None,
                          "summary": None}, "service_tier": "default",
            "store": body.stored,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "text": _text_echo(body), "tool_choice": _choice_echo(body),
            "tools": [t.echo() for t in body.tools or ()], "top_logprobs": 0,
            "top_p": 1.0 if body.top_p is None else body.top_p, "truncation": "disabled",
            "user": body.user,
        }
        return cls(base, new_id("msg"))

    @property
    def id(self) -> str:
        result: str = self.base["id"]
        return result

    def message(self, text: str, status: str) -> dict[str, Any]:
        return {"id": self.message_id, "type": "message", "role": "assistant",
                "status": status, "content": [self.part(text)]}

    @staticmethod
    def part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def snapshot(self, status: str, output: list[dict[str, Any]] | None = None,
                 usage: Usage | None = None) -> dict[str, Any]:
        """The response while it is queued or runs."""
        return {**self.base, "status": status, "output": output or [], "error": None,
                "incomplete_details": None, "completed_at": None,
                "usage": None if usage is None else usage_json(usage)}

    def final(self, end: Finished | Failed, text: str,
              items: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The response once it ended, `text` its whole answer (or, with tools, `items`
        its output items, closed: items.py)."""
        status = status_of(end)
        if items is not None:
            output = [] if status == "failed" and not any(
                i["type"] == "function_call" or i["content"][0]["text"] for i in items
            ) else items
        else:
            output = [] if status == "failed" and not text else [
                self.message(text, "completed" if status == "completed" else "incomplete")]
        out = self.snapshot(status, output, end.usage)
        out["completed_at"] = int(time.time())
        if isinstance(end, Failed):
            out["error"] = failure(end.error)
        elif status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        return out


def _choice_echo(body: ResponsesRequest) -> Any:
    choice = body.tool_choice
    if choice is None:
        return "auto"
    return choice if isinstance(choice, str) else choice.model_dump()


def input_items(body: ResponsesRequest) -> list[dict[str, Any]]:
    """This request's input as GET /v1/responses/{id}/input_items lists it (in order)."""
    return [item.item() for item in body.input]
