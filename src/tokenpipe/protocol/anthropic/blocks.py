"""Anthropic content blocks in a request, and the turns they make for the core:

- `text`: the turn's text (a turn's text blocks joined with newlines).
- `tool_use` (assistant turns): a call, `ToolCall(id, name, input as JSON text)`.
- `tool_result` (user turns): one `tool` message answering `tool_use_id`; its content a
  string or `text` blocks; `is_error: true` puts "Error: " before it (the core's messages
  have no error flag, so the model reads it).
- `thinking` / `redacted_thinking` (assistant turns): dropped from the prompt, as Anthropic
  drops earlier turns' thinking.

A user turn's text and tool results become core messages in their order: each run of text
one `user` message, each result one `tool` message. Any other block type is a 400 naming
where it is. Errors are pydantic custom errors whose `at` is the place below the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticCustomError

from ...types import Message, ToolCall
from ..common import check_text

_TEXT_FIELDS = {"type", "text", "cache_control", "citations"}
# caller and toolset_name (the SDK's blocks carry them, null) are accepted and ignored
_FIELDS = {"tool_use": {"type", "id", "name", "input", "cache_control", "caller",
                        "toolset_name"},
           "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control",
                           "toolset_name"},
           "thinking": {"type", "thinking", "signature"},
           "redacted_thinking": {"type", "data"}}
ASSISTANT_ONLY = ("tool_use", "thinking", "redacted_thinking")


@dataclass(frozen=True, slots=True)
class Block:
    """One block as the core needs it: `text` for text, thinking and results; `id` the
    call's (tool_use) or the call answered (tool_result)."""

    type: str
    text: str = ""
    id: str = ""
    name: str = ""
    arguments: str = ""
    is_error: bool = False


def _error(code: str, message: str, at: str, **ctx: Any) -> PydanticCustomError:
    return PydanticCustomError(code, message, {"at": at, **ctx})


def _string(block: dict[str, Any], key: str, at: str, *, empty: bool = True) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise _error("invalid_type" if key in block else "missing",
                     "Input should be a valid string" if key in block else "Field required",
                     f"{at}.{key}")
    if not empty and not value:
        raise _error("string_too_short", "String should have at least 1 character",
                     f"{at}.{key}")
    return check_text(value, at=f"{at}.{key}")


def _known_fields(block: dict[str, Any], fields: set[str], at: str) -> None:
    extra = sorted(set(block) - fields)
    if extra:
        raise _error("extra_forbidden", "Extra inputs are not permitted", f"{at}.{extra[0]}")
    if not isinstance(block.get("cache_control", {}), dict | None):
        raise _error("invalid_type", "Input should be a valid dictionary",
                     f"{at}.cache_control")


def text_of(block: Any, at: str) -> str:
    """A `text` block's text; a block of another type is refused, naming where."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _error("invalid_type", "a content block is an object with a string `type`", at)
    if block["type"] != "text":
        raise _error("unsupported_value", "content blocks of type '{kind}' are not supported "
                     "here: this server reads text only", f"{at}.type", kind=block["type"])
    return _text_block(block, at).text


def _text_block(block: dict[str, Any], at: str) -> Block:
    text = _string(block, "text", at)
    _known_fields(block, _TEXT_FIELDS, at)
    if not isinstance(block.get("citations", []), list | None):
        raise _error("invalid_type", "Input should be a valid list", f"{at}.citations")
    if block.get("citations"):  # null or [] pass: nothing else can be honoured
        raise _error("unsupported_value", "citations are not supported", f"{at}.citations")
    return Block("text", text)


def _tool_use(block: dict[str, Any], at: str) -> Block:
    _known_fields(block, _FIELDS["tool_use"], at)
    call_id = _string(block, "id", at, empty=False)
    name = _string(block, "name", at, empty=False)
    arguments = block.get("input")
    if not isinstance(arguments, dict):
        raise _error("invalid_type" if "input" in block else "missing",
                     "Input should be a valid dictionary" if "input" in block
                     else "Field required", f"{at}.input")
    return Block("tool_use", id=call_id, name=name,
                 arguments=json.dumps(arguments, ensure_ascii=False))


def _tool_result(block: dict[str, Any], at: str) -> Block:
    _known_fields(block, _FIELDS["tool_result"], at)
    call_id = _string(block, "tool_use_id", at, empty=False)
    content = block.get("content", "")
    if isinstance(content, list):
        text = "\n".join(text_of(b, f"{at}.content.{i}") for i, b in enumerate(content))
    elif isinstance(content, str):
        text = check_text(content, at=f"{at}.content")
    else:
        raise _error("invalid_type", "Input should be a valid string or a list of text "
                     "blocks", f"{at}.content")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool | None):
        raise _error("invalid_type", "Input should be a valid boolean", f"{at}.is_error")
    return Block("tool_result", text, id=call_id, is_error=bool(is_error))


def parse_block(block: Any, at: str) -> Block:
    """One block of a message's content."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _error("invalid_type", "a content block is an object with a string `type`", at)
    kind = block["type"]
    if kind == "text":
        return _text_block(block, at)
    if kind == "tool_use":
        return _tool_use(block, at)
    if kind == "tool_result":
        return _tool_result(block, at)
    if kind in ("thinking", "redacted_thinking"):
        _known_fields(block, _FIELDS[kind], at)
        _string(block, "thinking" if kind == "thinking" else "data", at)
        if kind == "thinking" and "signature" in block:
            _string(block, "signature", at)
        return Block(kind)  # dropped from the prompt
    raise _error("unsupported_value", "content blocks of type '{kind}' are not supported: "
                 "this server reads text, tool_use, tool_result and thinking", f"{at}.type",
                 kind=kind)


def parse_content(value: Any) -> Any:
    """A message's content: a string is one text block; a list, its blocks in order."""
    if isinstance(value, str):
        return (Block("text", check_text(value)),)
    if isinstance(value, list):
        return tuple(parse_block(block, str(i)) for i, block in enumerate(value))
    raise PydanticCustomError("invalid_type", "Input should be a valid string or a list of "
                              "content blocks")


def turns(role: str, blocks: tuple[Block, ...]) -> list[Message]:
    """The core messages one Anthropic message makes."""
    if role == "assistant":
        text = "\n".join(b.text for b in blocks if b.type == "text")
        calls = tuple(ToolCall(b.id, b.name, b.arguments) for b in blocks
                      if b.type == "tool_use")
        return [Message("assistant", text, calls)]
    out: list[Message] = []
    texts: list[str] = []
    for b in blocks:
        if b.type == "text":
            texts.append(b.text)
            continue
        if texts:
            out.append(Message("user", "\n".join(texts)))
            texts = []
        result = f"Error: {b.text}" if b.is_error else b.text
        out.append(Message("tool", result, tool_call_id=b.id))
    if texts or not out:
        out.append(Message("user", "\n".join(texts)))
    return out
