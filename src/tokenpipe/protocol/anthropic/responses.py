"""Anthropic response objects: what /docs documents; the answers themselves are built as
plain dicts by events.py (the same fields)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

StopReason = Literal["end_turn", "max_tokens", "stop_sequence"]


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


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
    content: list[TextBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = Field(description="Always null for now: the session does "
                                      "not tell which stop sequence matched.")
    usage: Usage


class TokenCount(BaseModel):
    input_tokens: int


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    type: Literal["error"] = "error"
    error: ErrorDetail
