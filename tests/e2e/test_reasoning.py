"""Reasoning (issue 17, item 5): a thinking section at the start of the answer goes to
`reasoning_content` and `reasoning` on the OpenAI API (never into `content`), to the
`reasoning` channel on tokenpipe.v1 for a client that asks, and stays inline with
`reasoning_format: "none"`; stop strings and max_tokens hold across the boundary. On a
scripted engine (the fake engine echoing think tags, cut into 1-3 byte tokens) and on the
real bundled model behind a chat template whose generation prompt opens the section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.client import Client

pytestmark = pytest.mark.e2e

THOUGHT, ANSWER = "First, recall that 2 + 2 is 4. 日本語も", "The answer is 4 🎉."
SCRIPTED: Any = [{"role": "user", "content": f"[[echo]]<think>{THOUGHT}</think>\n\n{ANSWER}"}]


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                           max_retries=0,
                                           timeout=60))


def test_whole_and_streamed_split_the_same(fake_server: ServerProcess) -> None:
    c = sdk(fake_server)
    whole = c.chat.completions.create(model="fake", messages=SCRIPTED)
    message: Any = whole.choices[0].message
    assert (message.content, message.reasoning_content, message.reasoning) == (
        ANSWER, THOUGHT, THOUGHT)
    assert whole.usage is not None and whole.usage.completion_tokens_details is not None
    assert 0 < whole.usage.completion_tokens_details.reasoning_tokens < (
        whole.usage.completion_tokens)
    thought = answer = ""
    order: list[str] = []
    for chunk in c.chat.completions.create(model="fake", messages=SCRIPTED, stream=True):
        delta: Any = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        if getattr(delta, "reasoning_content", None):
            assert delta.reasoning == delta.reasoning_content
            thought += delta.reasoning_content
            order.append("reasoning")
        if delta.content:
            answer += delta.content
            order.append("content")
    assert (thought, answer) == (THOUGHT, ANSWER)
    assert order == sorted(order, key=lambda k: k == "content")  # all reasoning first


def test_reasoning_format_none_keeps_the_section_inline(fake_server: ServerProcess) -> None:
    whole = sdk(fake_server).chat.completions.create(
        model="fake", messages=SCRIPTED, extra_body={"reasoning_format": "none"})
    message: Any = whole.choices[0].message
    assert message.content == f"<think>{THOUGHT}</think>\n\n{ANSWER}"
    assert getattr(message, "reasoning_content", None) is None


def test_a_stop_string_in_the_thinking_does_not_end_the_answer(fake_server: ServerProcess
                                                               ) -> None:
    c = sdk(fake_server)
    whole = c.chat.completions.create(model="fake", messages=SCRIPTED, stop=["recall", "is 4 "])
    message: Any = whole.choices[0].message
    assert message.reasoning_content == THOUGHT  # "recall" is in the thinking: no stop
    assert message.content == "The answer "  # "is 4 " in the content: stop, never sent
    assert whole.choices[0].finish_reason == "stop"


def test_max_tokens_inside_the_thinking_is_length_with_no_content(
        fake_server: ServerProcess) -> None:
    whole = sdk(fake_server).chat.completions.create(model="fake", messages=SCRIPTED,
                                                     max_tokens=8)
    message: Any = whole.choices[0].message
    assert whole.choices[0].finish_reason == "length"
    assert message.content == "" and THOUGHT.startswith(message.reasoning_content)
    assert "<" not in message.reasoning_content  # no piece of a tag


async def test_tokenpipe_v1_only_a_client_that_asks_gets_the_channel(
        fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        plain = await client.generate(SCRIPTED)
        text = await plain.collect()
        assert text == f"<think>{THOUGHT}</think>\n\n{ANSWER}"  # as before: no channel
        assert all(set(d) == {"type", "id", "seq", "text"} for d in plain.deltas)
        asked = await client.generate(SCRIPTED, params={"reasoning_format": "auto"})
        assert await asked.collect() == ANSWER
        thought = "".join(d["text"] for d in asked.deltas if d.get("channel") == "reasoning")
        assert thought == THOUGHT
        assert [d["seq"] for d in asked.deltas] == list(range(len(asked.deltas)))
        assert asked.end is not None
        assert asked.end["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0


THINKING_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}")
# A template of a model that can think but does not open the section itself (Qwen3's kind:
# it writes an empty one only when thinking is off): the model, or a thinking budget's
# grammar, writes <think>.
QWEN3_LIKE_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}")


@pytest.mark.model
def test_a_template_that_opens_the_thinking_on_the_real_model(live_server: Any,
                                                              tmp_path: Path) -> None:
    """The generation prompt ends with <think>: the answer starts inside the section (the
    135M model knows no such section: what it writes before a </think>, if it ever
    writes one, is reasoning)."""
    template = tmp_path / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    url = live_server("--chat-template", str(template), "--parallel", "2")
    c = closed_after_test(openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                                        timeout=120))
    ask: Any = [{"role": "user", "content": "What is 2 + 2?"}]
    whole = c.chat.completions.create(model="SmolLM2-135M-Instruct", messages=ask,
                                      temperature=0, max_tokens=24)
    message: Any = whole.choices[0].message
    inline = c.chat.completions.create(model="SmolLM2-135M-Instruct", messages=ask,
                                       temperature=0, max_tokens=24,
                                       extra_body={"reasoning_format": "none"})
    raw = inline.choices[0].message.content or ""
    streamed = {"reasoning": "", "content": ""}
    for chunk in c.chat.completions.create(model="SmolLM2-135M-Instruct", messages=ask,
                                           temperature=0, max_tokens=24, stream=True):
        delta: Any = chunk.choices[0].delta if chunk.choices else None
        if delta is not None:
            streamed["reasoning"] += getattr(delta, "reasoning_content", None) or ""
            streamed["content"] += delta.content or ""
    assert streamed == {"reasoning": message.reasoning_content or "",
                        "content": message.content or ""}  # streamed as whole
    if "</think>" in raw:  # the model closed the section: the rest is the content
        thought, _, rest = raw.partition("</think>")
        assert (message.reasoning_content, message.content) == (thought, rest.lstrip("\n"))
    else:  # it never closed it: all of the answer is reasoning, none of it content
        assert message.reasoning_content == raw and message.content == ""
        usage = whole.usage
        assert usage is not None and usage.completion_tokens_details is not None
        # every token but an end-of-turn token (which has no text) was thinking
        assert usage.completion_tokens_details.reasoning_tokens >= usage.completion_tokens - 1
