"""Assistant prefill: a chat whose last message is the assistant's (without tool calls) is
an answer already begun. It is rendered as the template's prompt for a new answer over the
earlier messages, followed by that message's content verbatim with no end of turn, so the
model goes on with it (what llama.cpp's server and Anthropic's API call prefill); the
answer streamed is only what comes after it.

`continuation` is the one rule for going on with an answer somewhere else when what was
producing it stopped (a replica taking a stream over, server/state/redis_store.py; the
openai engine moving an answer to another upstream): the request again with the text so
far as the answer begun."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..types import GenerationRequest, Message, SamplingParams, ToolChoice


def prefill_of(request: GenerationRequest) -> str | None:
    """The start of the answer a chat request carries as its last message, else None."""
    messages = request.messages
    if not messages or messages[-1].role != "assistant" or messages[-1].tool_calls:
        return None
    return messages[-1].content


def render_with_prefill(request: GenerationRequest,
                        render: Callable[[GenerationRequest], str]) -> str:
    """`render` (the template with its generation prompt) over the messages before a
    prefill, then the prefill; a request without one is rendered as it is."""
    start = prefill_of(request)
    if start is None:
        return render(request)
    assert request.messages is not None
    return render(replace(request, messages=request.messages[:-1])) + start


def continuation(request: GenerationRequest, text: str, left: int) -> GenerationRequest | None:
    """The request that goes on from `text`, an answer begun as plain content, with `left`
    of its max_tokens still to come: the text appended to a raw prompt, or to the chat as
    its last assistant turn (the end of one the request began with itself); the same seed
    and sampling. None where going on would not be the same answer: an output format or
    tools that may be called (their grammar starts again at the continuation, not where
    the text left it), logprobs (the text's were counted against another prompt), or no
    tokens left. The caller checks that `text` is content only (no reasoning, no calls)."""
    params = _going_on(request, left)
    if params is None:
        return None
    if request.prompt_ids is not None:  # not continued as text: from_ids() does
        return None
    if request.prompt is not None:
        return replace(request, prompt=request.prompt + text, params=params)
    messages = list(request.messages or ())
    if prefill_of(request) is not None:
        messages[-1] = replace(messages[-1], content=messages[-1].content + text)
    elif text:
        messages.append(Message("assistant", text))
    return replace(request, messages=tuple(messages), params=params)


def from_ids(request: GenerationRequest, prompt: tuple[int, ...], answer: tuple[int, ...],
             left: int) -> GenerationRequest | None:
    """`continuation` exactly: the request as a raw prompt of token ids, the prompt's as
    the model read it (its template applied) and the answer's so far, so nothing is
    tokenized again and `left` is exact. None where `continuation` would be, and with stop
    strings (an upstream holds back text that may begin one while its ids are sent: the
    ids would run ahead of the text)."""
    params = _going_on(request, left)
    if params is None or request.params.stop:
        return None
    return replace(request, messages=None, prompt="", prompt_ids=prompt + answer,
                   params=params, tools=(), tool_choice=ToolChoice())


def _going_on(request: GenerationRequest, left: int) -> SamplingParams | None:
    if request.format is not None or request.params.logprobs is not None or (
            request.tools and request.tool_choice.mode != "none") or left <= 0:
        return None
    return replace(request.params, max_tokens=left,
                   given=request.params.given | {"max_tokens"})
