"""Assistant prefill: a chat whose last message is the assistant's (without tool calls) is
an answer already begun. It is rendered as the template's prompt for a new answer over the
earlier messages, followed by that message's content verbatim with no end of turn, so the
model goes on with it (what llama.cpp's server and Anthropic's API call prefill); the
answer streamed is only what comes after it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..types import GenerationRequest


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
