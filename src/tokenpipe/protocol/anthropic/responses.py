"""Anthropic response objects: what /docs documents; the answers themselves are built as
plain dicts by events.py (the same fields)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = Field(description='Always "": not a signature, nothing signs it.')


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str = Field(description="toolu_…")
    name: str
    input: dict[str, Any] = Field(description="The call's arguments, valid for the tool's "
                                  "input_schema (unless max_tokens cut the call).")


class Usage(BaseModel):
    input_tokens: int = Field(description="Prompt tokens not read from the prompt cache.")
    output_tokens: int
    cache_read_input_tokens: int = Field(description="Prompt tokens whose KV cache was "
                                         "reused (an earlier turn, a shared prefix).")
    cache_creation_input_tokens: int = Field(default=0, description="Always 0: nothing is "
                                             "written to a cache on request.")


class MessageResponse(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ThinkingBlock | TextBlock | ToolUseBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = Field(description="The stop sequence that ended the answer "
                                      "(stop_reason stop_sequence), else null.")
    usage: Usage


class TokenCount(BaseModel):
    input_tokens: int


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    type: Literal["error"] = "error"
    error: ErrorDetail
