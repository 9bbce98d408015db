"""Frozen value types shared by every layer; nothing here knows about transports or engines."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # errors.py imports nothing of tokenpipe either
    from .errors import TokenpipeError

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings. `max_tokens=None` means the server's default."""

    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """What the answer must be, enforced token by token (constrain/): `json_object` is any
    JSON object; `json_schema` is JSON valid against `schema` (the schema as JSON text, its
    key order kept: properties are generated in that order). `name` and `strict` are the
    client's words, kept for an upstream that wants them."""

    kind: Literal["json_object", "json_schema"]
    schema: str | None = None
    name: str | None = None
    strict: bool | None = None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """Either chat `messages` (through the model's chat template) or a raw `prompt`."""

    messages: tuple[Message, ...] | None = None
    prompt: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    model: str | None = None
    format: OutputFormat | None = None  # None: free text

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("exactly one of messages or prompt is required")


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV came from a cache, not decoded again

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Timing:
    queue_ms: float
    ttft_ms: float | None
    total_ms: float
    tokens_per_s: float | None


# What an engine yields: text pieces (never a split UTF-8 character; may be empty when a
# token produced only part of a character), then exactly one EngineFinish.
@dataclass(frozen=True, slots=True)
class EngineStart:
    prompt_tokens: int | None  # None: known only from EngineFinish (openai engine)


@dataclass(frozen=True, slots=True)
class EngineText:
    text: str
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class EngineFinish:
    reason: FinishReason
    usage: Usage


EngineEvent = EngineStart | EngineText | EngineFinish


# What a session yields to its reader (session.py): Queued while waiting, Started, Delta...,
# then exactly one Finished or Failed.
@dataclass(frozen=True, slots=True)
class Queued:
    position: int  # 1 = next


@dataclass(frozen=True, slots=True)
class Started:
    model: str
    prompt_tokens: int | None
    stream: str | None  # resume token, only for resumable sessions


@dataclass(frozen=True, slots=True)
class Delta:
    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    reason: FinishReason
    usage: Usage
    timing: Timing


@dataclass(frozen=True, slots=True)
class Failed:
    error: TokenpipeError
    usage: Usage


Event = Queued | Started | Delta | Finished | Failed
