"""A thinking budget as a grammar: the answer opens with a thinking section of at most
`reasoning_budget` tokens, then the answer proper (free text, a format, or tool calls, as
the request asks).

    <think>…at most N tokens…</think>
    the answer

The section's body is a llguidance rule with `max_tokens=N`: the model may close the
section itself (`</think>` ends the body), and once it has spent N tokens inside, the mask
allows nothing but `</think>`, so the close is forced and the answer starts. Where the
chat template's generation prompt already opened the section (`inside`), the answer starts
in the body; otherwise the grammar writes `<think>` first (the client asked for thinking).
Up to two newlines may follow the close, as models write them (never content: the
ReasoningSplitter drops them); a free-text answer is not blank (a small model would
otherwise end its answer with the close)."""

from __future__ import annotations

import json

from ..types import GenerationRequest
from .tools import text_rule, tools_lark

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # as the scheduler's ReasoningSplitter
FREE_TEXT = r"answer: TEXT" + "\n" + r"TEXT: /(?s:.*\S.*)/"  # an answer: not blank


def template_thinks(template: str | None) -> bool:
    """Whether a chat template writes a thinking section (DeepSeek R1, Qwen3, QwQ, SmolLM3
    and their kin write `<think>` in it): the model can think, and a client may ask it to
    (GenerationRequest.think). A template without one (the bundled SmolLM2's) cannot."""
    return bool(template) and THINK_OPEN in str(template)


def thinking_lark(request: GenerationRequest, *, inside: bool) -> str:
    """The Lark text of an answer under the request's thinking budget."""
    budget = request.reasoning_budget
    assert budget is not None and budget >= 1
    if request.tools:
        inner = tools_lark(request)
    elif request.format is not None:
        inner = "start: answer\n" + text_rule(request.format)
    else:
        inner = "start: answer\n" + FREE_TEXT
    assert inner.startswith("start:")
    inner = "answer_start:" + inner.removeprefix("start:")  # the answer after the section
    opening = "" if inside else json.dumps(THINK_OPEN) + " "
    return "\n".join([
        f"start: {opening}think {json.dumps(THINK_CLOSE)} AFTER answer_start",
        f"think[max_tokens={budget}]: THOUGHT",
        f"THOUGHT: /(?s:.*)/ & ~/(?s:.*){THINK_CLOSE.replace('/', chr(92) + '/')}(?s:.*)/",
        r"AFTER: /\n{0,2}/",
        inner])


def thinking_grammar(request: GenerationRequest, *, inside: bool) -> str:
    import llguidance

    return str(llguidance.LLMatcher.grammar_from_lark(thinking_lark(request, inside=inside)))
