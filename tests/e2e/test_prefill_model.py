"""Assistant prefill on the real bundled model (llama.cpp): a conversation whose last
message is a partial assistant answer is continued, not answered anew, through the OpenAI
chat door and tokenpipe.v1 alike (the chat page's Continue relies on it)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

MODEL = "SmolLM2-135M-Instruct"
START = "The capital of France is"
ASKED: Any = [{"role": "user", "content": "What is the capital of France?"}]
PREFILLED: Any = [*ASKED, {"role": "assistant", "content": START}]


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                           max_retries=0,
                                           timeout=60))


async def test_a_prefilled_answer_is_continued(model_server: ServerProcess) -> None:
    c = sdk(model_server)
    fresh = c.chat.completions.create(model=MODEL, messages=ASKED, temperature=0,
                                      max_tokens=12).choices[0].message.content or ""
    whole = c.chat.completions.create(model=MODEL, messages=PREFILLED, temperature=0,
                                      max_tokens=12)
    more = whole.choices[0].message.content or ""
    assert more.strip(), "nothing came after the prefill"
    # the continuation goes on from the start: it neither repeats it nor begins a new turn
    assert not more.lstrip().startswith(START), more
    assert not more.lstrip().startswith(fresh.strip()[:12]), (fresh, more)
    # the prompt holds the start: more prompt tokens than the question alone
    asked = c.chat.completions.create(model=MODEL, messages=ASKED, max_tokens=1)
    assert whole.usage is not None and asked.usage is not None
    assert whole.usage.prompt_tokens > asked.usage.prompt_tokens

    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=MODEL, messages=PREFILLED, temperature=0, max_tokens=12, stream=True)
        if ch.choices)
    assert streamed == more  # greedy: the same continuation, streamed or whole

    async with Client(model_server.ws_url) as client:  # tokenpipe.v1 messages alike
        gen = await client.generate(PREFILLED, params={"temperature": 0, "max_tokens": 12})
        assert await gen.collect() == more

