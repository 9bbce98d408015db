"""The OpenAI objects of one answer: chat.completion (and its chunks) or text_completion,
as SSE events or whole. Sans-IO: bytes and models out, nothing sent."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from ...types import Delta, TokenLogprob, Usage
from .. import sse
from .responses import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkDelta,
    Completion,
    CompletionLogprobs,
    CompletionTokensDetails,
    FunctionCall,
    FunctionDelta,
    PromptTokensDetails,
    TextChoice,
    TokenLogprobOut,
    ToolCallDelta,
    ToolCallOut,
    TopLogprob,
    UsageInfo,
    now,
)


def usage_info(usage: Usage) -> UsageInfo:
    return UsageInfo(prompt_tokens=usage.prompt_tokens,
                     completion_tokens=usage.completion_tokens,
                     total_tokens=usage.total_tokens,
                     prompt_tokens_details=PromptTokensDetails(
                         cached_tokens=usage.cached_tokens),
                     completion_tokens_details=CompletionTokensDetails(
                         reasoning_tokens=usage.reasoning_tokens,
                         accepted_prediction_tokens=usage.accepted_tokens,
                         rejected_prediction_tokens=usage.drafted_tokens
                         - usage.accepted_tokens))


# The per-token chunk is the one hot path: built once through its pydantic model with a
# marker for the text, then filled in by string joins (pydantic per token cost ~30 µs).
_MARK = "\u0001tokenpipe-text\u0001"


def _template(chunk: bytes) -> tuple[bytes, bytes]:
    marker = json.dumps(_MARK).encode()
    before, found, after = chunk.partition(marker)
    if not found:
        raise RuntimeError("chunk template without its text marker")
    return before, after


def _fill(around: tuple[bytes, bytes], text: str) -> bytes:
    return around[0] + json.dumps(text, ensure_ascii=False).encode() + around[1]


def chat_logprobs(entries: Iterable[TokenLogprob]) -> ChoiceLogprobs:
    """A chat choice's (or chunk's) `logprobs` object."""
    return ChoiceLogprobs(content=[TokenLogprobOut(
        token=e.token, logprob=e.logprob, bytes=list(e.data),
        top_logprobs=[TopLogprob(token=t, logprob=lp, bytes=list(b)) for t, lp, b in e.top])
        for e in entries])


def completion_logprobs(entries: Iterable[TokenLogprob]) -> CompletionLogprobs:
    """A text completion's (or chunk's) `logprobs` object."""
    listed = list(entries)
    return CompletionLogprobs(tokens=[e.token for e in listed],
                              token_logprobs=[e.logprob for e in listed],
                              top_logprobs=[{t: lp for t, lp, _ in e.top} for e in listed],
                              text_offset=[e.offset for e in listed])


def _entries(deltas: list[Delta]) -> Iterable[TokenLogprob]:
    return (e for d in deltas if d.channel == "content" for e in d.logprobs)


def _all_ids(deltas: list[Delta]) -> list[int]:
    return [i for d in deltas for i in d.token_ids]


class ChatRender:
    """chat.completion / chat.completion.chunk objects of one answer; `scored`: the
    request asked for logprobs (its content chunks carry them); `ids`: for token ids
    (`return_token_ids`: each content chunk's `token_ids`, the prompt's once, as
    `prompt_token_ids` of the first chunk that has them). `index` names the choice
    (several with `n`)."""

    opening_has_prompt = True  # its opening chunk can carry the prompt's token ids

    def __init__(self, model: str, *, scored: bool = False, ids: bool = False) -> None:
        self.head: dict[str, Any] = {"id": "chatcmpl-" + secrets.token_hex(12),
                                     "created": now(), "model": model}
        self._around: dict[int, tuple[bytes, bytes]] = {}
        self.scored, self.ids = scored, ids

    def _chunk(self, choice: ChunkChoice | None, usage: Usage | None = None,
               prompt: tuple[int, ...] | None = None) -> bytes:
        return sse.data(ChatCompletionChunk(
            **self.head, choices=[] if choice is None else [choice],
            usage=None if usage is None else usage_info(usage),
            prompt_token_ids=None if prompt is None else list(prompt)))

    def opening(self, index: int = 0, prompt: tuple[int, ...] | None = None) -> bytes:
        return self._chunk(ChunkChoice(index=index, delta=ChunkDelta(role="assistant",
                                                                     content="")),
                           prompt=prompt)

    def ids_delta(self, delta: Delta, index: int = 0,
                  prompt: tuple[int, ...] | None = None) -> bytes:
        """A content delta with its token ids (and the prompt's, where given)."""
        return self._chunk(ChunkChoice(
            index=index, delta=ChunkDelta(content=delta.text), token_ids=list(delta.token_ids),
            logprobs=chat_logprobs(delta.logprobs) if self.scored else None), prompt=prompt)

    def delta(self, text: str, index: int = 0) -> bytes:
        around = self._around.get(index)
        if around is None:
            around = self._around[index] = _template(self._chunk(ChunkChoice(
                index=index, delta=ChunkDelta(content=_MARK))))
        return _fill(around, text)

    def scored_delta(self, delta: Delta, index: int = 0) -> bytes:
        """A content delta with the logprobs of the tokens its text completes."""
        return self._chunk(ChunkChoice(index=index, delta=ChunkDelta(content=delta.text),
                                       logprobs=chat_logprobs(delta.logprobs)))

    def part(self, delta: Delta, index: int = 0) -> bytes:
        """A delta of a channel other than content: reasoning, or a tool call's start or
        arguments."""
        if delta.channel == "reasoning":
            return self._chunk(ChunkChoice(index=index, delta=ChunkDelta(
                reasoning_content=delta.text, reasoning=delta.text)))
        call = ToolCallDelta(index=delta.index, function=FunctionDelta(arguments=delta.text))
        if delta.call_id is not None:
            call.id, call.type, call.function.name = delta.call_id, "function", delta.name
        return self._chunk(ChunkChoice(index=index, delta=ChunkDelta(tool_calls=[call])))

    def finish(self, reason: str, index: int = 0) -> bytes:
        return self._chunk(ChunkChoice(index=index, delta=ChunkDelta(),
                                       finish_reason=reason))  # type: ignore[arg-type]

    def usage(self, usage: Usage) -> bytes:
        return self._chunk(None, usage)

    def whole(self, deltas: list[Delta], reason: str, usage: Usage,
              prompt: tuple[int, ...] | None = None) -> BaseModel:
        return self.whole_of([(deltas, reason)], usage, prompt)

    def whole_of(self, answers: list[tuple[list[Delta], str]], usage: Usage,
                 prompt: tuple[int, ...] | None = None) -> BaseModel:
        """One object for the choices, each (its deltas, its finish_reason), in order."""
        return ChatCompletion(**self.head, usage=usage_info(usage), choices=[
            self._choice(i, deltas, reason) for i, (deltas, reason) in enumerate(answers)],
            prompt_token_ids=list(prompt or ()) if self.ids else None)

    def _choice(self, index: int, deltas: list[Delta], reason: str) -> ChatChoice:
        text = "".join(d.text for d in deltas if d.channel == "content")
        thought = "".join(d.text for d in deltas if d.channel == "reasoning") or None
        calls = tool_calls(deltas)
        message = AssistantMessage(content=None if calls and not text else text,
                                   tool_calls=calls or None, reasoning_content=thought,
                                   reasoning=thought)
        scores = chat_logprobs(_entries(deltas)) if self.scored else None
        return ChatChoice(index=index, message=message, logprobs=scores,
                          finish_reason=reason,  # type: ignore[arg-type]
                          token_ids=_all_ids(deltas) if self.ids else None)


def tool_calls(deltas: list[Delta]) -> list[ToolCallOut]:
    """The calls of a whole answer, from its tool_call deltas."""
    calls: list[ToolCallOut] = []
    for d in deltas:
        if d.channel != "tool_call":
            continue
        if d.call_id is not None:
            calls.append(ToolCallOut(id=d.call_id, function=FunctionCall(name=d.name or "",
                                                                         arguments="")))
        calls[d.index].function.arguments += d.text
    return calls


class CompletionRender:
    """text_completion objects of one answer (streamed chunks have the same shape)."""

    opening_has_prompt = False  # no opening chunk: the prompt's ids go with the first text

    def __init__(self, model: str, *, scored: bool = False, ids: bool = False) -> None:
        self.head: dict[str, Any] = {"id": "cmpl-" + secrets.token_hex(12),
                                     "created": now(), "model": model}
        self._around: dict[int, tuple[bytes, bytes]] = {}
        self.scored, self.ids = scored, ids

    def _chunk(self, choices: list[TextChoice], usage: Usage | None = None) -> bytes:
        return sse.data(Completion(**self.head, choices=choices,
                                   usage=None if usage is None else usage_info(usage)))

    def opening(self, index: int = 0, prompt: tuple[int, ...] | None = None) -> bytes:
        return b""

    def ids_delta(self, delta: Delta, index: int = 0,
                  prompt: tuple[int, ...] | None = None) -> bytes:
        """A delta with its token ids (and the prompt's in its choice, where given)."""
        return self._chunk([TextChoice(
            index=index, text=delta.text, token_ids=list(delta.token_ids),
            prompt_token_ids=None if prompt is None else list(prompt),
            logprobs=completion_logprobs(delta.logprobs) if self.scored else None)])

    def delta(self, text: str, index: int = 0) -> bytes:
        around = self._around.get(index)
        if around is None:
            around = self._around[index] = _template(self._chunk([TextChoice(
                index=index, text=_MARK)]))
        return _fill(around, text)

    def scored_delta(self, delta: Delta, index: int = 0) -> bytes:
        return self._chunk([TextChoice(index=index, text=delta.text,
                                       logprobs=completion_logprobs(delta.logprobs))])

    def finish(self, reason: str, index: int = 0) -> bytes:
        return self._chunk([TextChoice(index=index, text="",
                                       finish_reason=reason)])  # type: ignore[arg-type]

    def usage(self, usage: Usage) -> bytes:
        return self._chunk([], usage)

    def part(self, delta: Delta, index: int = 0) -> bytes:
        return b""  # completions have no other channel

    def whole(self, deltas: list[Delta], reason: str, usage: Usage,
              prompt: tuple[int, ...] | None = None) -> BaseModel:
        return self.whole_of([(deltas, reason)], usage, prompt)

    def whole_of(self, answers: list[tuple[list[Delta], str]], usage: Usage,
                 prompt: tuple[int, ...] | None = None) -> BaseModel:
        return Completion(**self.head, usage=usage_info(usage), choices=[TextChoice(
            index=i, text="".join(d.text for d in deltas if d.channel == "content"),
            logprobs=completion_logprobs(_entries(deltas)) if self.scored else None,
            finish_reason=reason,  # type: ignore[arg-type]
            token_ids=_all_ids(deltas) if self.ids else None,
            prompt_token_ids=list(prompt or ()) if self.ids else None)
            for i, (deltas, reason) in enumerate(answers)])


Shape = ChatRender | CompletionRender  # the OpenAI objects of one answer
