"""Frozen value types shared by every layer; nothing here knows about transports or engines."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # errors.py imports nothing of tokenpipe either
    from .errors import TokenpipeError

Role = Literal["system", "user", "assistant", "tool"]
TURN_CHARS = 32  # what a chat template writes around each turn, at least: role tags


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant made: `arguments` is the JSON text it wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    """A chat turn. An assistant turn may carry the tool calls it made; a `tool` turn is
    one call's result, `tool_call_id` naming the call."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call: `parameters` is its JSON Schema as JSON text."""

    name: str
    description: str | None = None
    parameters: str = '{"type":"object","properties":{}}'


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """`auto` (text or calls), `none` (text only), `required` (at least one call), or
    `function` (one call of `name`); `parallel`: more than one call allowed, None where the
    client did not say (the server's default then: constrain.tools.resolved_choice)."""

    mode: Literal["auto", "none", "required", "function"] = "auto"
    name: str | None = None
    parallel: bool | None = None


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings. `max_tokens=None` means the server's default. `given`: the fields
    the client set (the rest are its door's defaults, which a model's table may replace)."""

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
    # each answer token's log-probability, with this many alternatives (0-20); None: none
    logprobs: int | None = None
    given: frozenset[str] = field(default=frozenset(), compare=False)

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
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    # a thinking section at the start of the answer goes to the reasoning channel (else
    # it stays in the content, as the model wrote it)
    split_reasoning: bool = False
    # at most this many tokens of thinking, then the section's close is forced
    # (constrain/thinking.py); None: no bound but max_tokens
    reasoning_budget: int | None = None
    # the client asked the model to think (each door's field: docs/protocol.md, "Asking a
    # model to think"); a model whose chat template has no thinking section refuses it
    think: bool = False
    # a raw prompt given as token ids (`prompt` is then ""): what the engine reads as it
    # is, no template and no BOS added (/v1/completions' prompt of ids; a continuation)
    prompt_ids: tuple[int, ...] | None = None
    # the answer's token ids go with its text (OpenAI doors' `return_token_ids`)
    token_ids: bool = False

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("exactly one of messages or prompt is required")

    def prompt_chars(self) -> int:
        """What templating and tokenizing the request reads: every part the prompt holds,
        not only the messages' text (tool calls' arguments, tools' schemas and
        descriptions, each turn's tags: 30,000 empty messages are a long prompt too)."""
        chars = sum(len(t.name) + len(t.description or "") + len(t.parameters)
                    for t in self.tools)
        if self.prompt is not None:
            return chars + len(self.prompt)
        for m in self.messages or ():
            chars += TURN_CHARS + len(m.content) + len(m.tool_call_id or "")
            for call in m.tool_calls:
                chars += len(call.id) + len(call.name) + len(call.arguments)
        return chars


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"  # the answer ended with one or more complete tool calls
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV came from a cache, not decoded again
    reasoning_tokens: int = 0  # completion tokens spent in a thinking section
    # speculative decoding (llama.cpp --speculate): tokens drafted, and of those, tokens
    # the answer took (each one a completion token too)
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Timing:
    queue_ms: float
    ttft_ms: float | None
    total_ms: float
    tokens_per_s: float | None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One answer token's log-probability (log-softmax of the engine's logits for that step,
    after the output format's mask: docs/protocol.md), its bytes (`data`), the `top`
    alternatives as (token, logprob, bytes), best first, and `offset`: where its text
    starts in the answer (set by the scheduler; 0 as the engine makes it)."""

    token: str
    logprob: float
    data: bytes
    top: tuple[tuple[str, float, bytes], ...] = ()
    offset: int = 0


# What an engine yields: text pieces (never a split UTF-8 character; may be empty when a
# token produced only part of a character), then exactly one EngineFinish.
@dataclass(frozen=True, slots=True)
class EngineStart:
    prompt_tokens: int | None  # None: known only from EngineFinish (openai engine)
    # the prompt's token ids where the engine knows them; the openai engine learns them
    # from its upstream's first chunk and says so in a second EngineStart then
    prompt_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class EngineProgress:
    """Prefill of a long prompt (more than one decode step of it): `done` of its `total`
    tokens are in the KV cache, those taken from a cache included. Before the first text."""

    done: int
    total: int


@dataclass(frozen=True, slots=True)
class EngineText:
    text: str
    tokens: int = 1
    # the tokens whose text this piece completes (only when the request asked for them)
    logprobs: tuple[TokenLogprob, ...] = ()
    # the ids of the tokens this piece counts, where the engine knows them
    token_ids: tuple[int, ...] = ()
    # speculative decoding: tokens drafted in the step that made this text, and accepted
    drafted: int = 0
    accepted: int = 0


@dataclass(frozen=True, slots=True)
class EngineFinish:
    reason: FinishReason
    usage: Usage


@dataclass(frozen=True, slots=True)
class EngineParts:
    """Text the engine got already apart from the content (the openai engine: its
    upstream's tool calls), as the scheduler's splitters would have made it."""

    parts: tuple[Part, ...]
    tokens: int = 1


EngineEvent = EngineStart | EngineProgress | EngineText | EngineParts | EngineFinish


# What a session yields to its reader (session.py): Queued while waiting, Started,
# Progress... (a long prompt's prefill, to readers that ask), Delta..., then exactly one
# Finished or Failed.
@dataclass(frozen=True, slots=True)
class Queued:
    position: int  # 1 = next; 0 with `loading`
    loading: bool = False  # waiting for its model to load (load on demand)


@dataclass(frozen=True, slots=True)
class Started:
    model: str
    prompt_tokens: int | None
    stream: str | None  # resume token, only for resumable sessions


@dataclass(frozen=True, slots=True)
class Progress:
    """The prompt's prefill so far: `done` of `total` prompt tokens processed."""

    done: int
    total: int


Channel = Literal["content", "reasoning", "tool_call"]


@dataclass(frozen=True, slots=True)
class Part:
    """Text of a channel other than the answer's content, as the session keeps it: the
    reasoning, or a tool call's argument JSON (the first part of a call carries its `id`
    and `name`; `index` numbers the calls of one answer from 0)."""

    text: str
    channel: Channel
    index: int = 0
    call_id: str | None = None
    name: str | None = None
    logprobs: tuple[TokenLogprob, ...] = ()  # content: the tokens whose text this carries
    token_ids: tuple[int, ...] = ()  # the ids of the tokens produced since the last part


@dataclass(frozen=True, slots=True)
class Delta:
    """The answer's next text. Content unless `channel` says otherwise; a `tool_call`
    delta's `index` names the call, and the call's first delta has its `call_id` and
    `name` (its text may be empty). `logprobs`: the tokens whose text this delta carries,
    only when the request asked for them. `token_ids`: the ids of the tokens produced
    since the previous delta, this one's text included, where the session keeps them
    (the request asked, or a resumable stream: a take-over continues from them)."""

    seq: int
    text: str
    channel: Channel = "content"
    index: int = 0
    call_id: str | None = None
    name: str | None = None
    logprobs: tuple[TokenLogprob, ...] = ()
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Finished:
    reason: FinishReason
    usage: Usage
    timing: Timing
    stop_sequence: str | None = None  # the stop string that ended the answer, if one did


@dataclass(frozen=True, slots=True)
class Failed:
    error: TokenpipeError
    usage: Usage


Event = Queued | Started | Progress | Delta | Finished | Failed
