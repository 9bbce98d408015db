"""Every sampling parameter through both doors of a real server on the real model (the
llm CLI's `-o frequency_penalty 0.5` and the SDK's `presence_penalty=0.5` once killed the
decode thread), and what outside clients expect of usage, context errors and unknown paths."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

PARAMS: list[dict[str, Any]] = [
    {"temperature": 0.7, "seed": 1},
    {"top_p": 0.5, "temperature": 0.7, "seed": 1},
    {"top_k": 5, "temperature": 0.7, "seed": 1},
    {"min_p": 0.2, "temperature": 0.7, "seed": 1},
    {"repetition_penalty": 1.3},
    {"presence_penalty": 0.5},
    {"frequency_penalty": 0.5},
    {"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1,
     "temperature": 0.9, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3},
]
ASK: Any = [{"role": "user", "content": "Write the word 'hello' ten times."}]


MODEL = "SmolLM2-135M-Instruct"  # the bundled model, as /v1/models lists it


def sdk(server: ServerProcess) -> openai.OpenAI:
    c = closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                        max_retries=0, timeout=60))
    assert [m.id for m in c.models.list().data] == [MODEL]
    return c


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(sorted(p)))
async def test_each_parameter_over_websocket_and_http(
    model_server: ServerProcess, params: dict[str, Any],
) -> None:
    async with Client(model_server.ws_url) as client:
        gen = await client.generate(ASK, params={**params, "max_tokens": 16})
        ws_text = await gen.collect()
    assert ws_text and gen.end is not None

    c = sdk(model_server)
    extra = {k: params[k] for k in ("top_k", "min_p", "repetition_penalty") if k in params}
    plain = {k: v for k, v in params.items() if k not in extra}
    plain.setdefault("temperature", 0)
    whole = c.chat.completions.create(model=MODEL, messages=ASK,
                                      max_tokens=16, extra_body=extra, **plain)
    assert whole.choices[0].message.content == ws_text  # greedy or seeded: one answer
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=16, stream=True,
        extra_body=extra, **plain) if ch.choices)
    assert streamed == ws_text
    health = await asyncio.to_thread(httpx.get, model_server.url + "/health")
    assert health.json()["status"] == "ok"


def test_a_penalty_changes_the_answer_through_the_sdk(model_server: ServerProcess) -> None:
    c = sdk(model_server)
    free = c.chat.completions.create(model=MODEL, messages=ASK,
                                     temperature=0, max_tokens=24).choices[0].message.content
    penalized = c.chat.completions.create(
        model=MODEL, messages=ASK, temperature=0, max_tokens=24,
        frequency_penalty=1.5).choices[0].message.content
    assert free and penalized and free != penalized
    assert (penalized or "").lower().count("hello") < (free or "").lower().count("hello")


def test_usage_says_how_much_of_the_prompt_came_from_the_cache(
    model_server: ServerProcess,
) -> None:
    c = sdk(model_server)
    messages: Any = [{"role": "system", "content": "You answer in one short sentence. " * 8},
                     {"role": "user", "content": "What is a cloud?"}]
    first = c.chat.completions.create(model=MODEL, messages=messages,
                                      temperature=0, max_tokens=8)
    again = c.chat.completions.create(model=MODEL, messages=messages,
                                      temperature=0, max_tokens=8)
    assert first.usage is not None and again.usage is not None
    assert first.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details is not None
    cached = again.usage.prompt_tokens_details.cached_tokens or 0
    # all of the prompt but its last token (decoded again for its logits) came from a slot
    assert cached == again.usage.prompt_tokens - 1
    assert again.usage.completion_tokens_details is not None
    assert again.usage.completion_tokens_details.reasoning_tokens == 0
    chunks = list(c.chat.completions.create(
        model=MODEL, messages=messages, temperature=0, max_tokens=8,
        stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == cached


async def test_end_usage_on_the_websocket_carries_the_same_details(
    model_server: ServerProcess,
) -> None:
    messages = [{"role": "user", "content": "Name a tree."}]
    async with Client(model_server.ws_url) as client:
        for _ in range(2):
            gen = await client.generate(messages, params={"max_tokens": 4})
            await gen.collect()
    assert gen.end is not None
    usage = gen.end["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 0,
                                                  "accepted_prediction_tokens": 0,
                                                  "rejected_prediction_tokens": 0}


def test_a_prompt_too_long_for_the_context_names_messages(model_server: ServerProcess) -> None:
    c = sdk(model_server)
    long: Any = [{"role": "user", "content": "word " * 3000}]  # > 2048 tokens a sequence
    for max_tokens in (None, 10):
        with pytest.raises(openai.BadRequestError) as info:
            c.chat.completions.create(model=MODEL, messages=long,
                                      **({"max_tokens": max_tokens} if max_tokens else {}))
        assert info.value.code == "context_length_exceeded"
        assert info.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as info:
        c.completions.create(model=MODEL, prompt="word " * 3000,
                             max_tokens=10)
    assert info.value.code == "context_length_exceeded" and info.value.param == "prompt"
    # a prompt that fits with a max_tokens that does not: max_tokens is at fault
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model=MODEL, max_tokens=2040,
                                  messages=[{"role": "user", "content": "word " * 40}])
    assert info.value.param == "max_tokens"
    assert "at most" in info.value.message


def test_post_to_an_unknown_path_is_404(model_server: ServerProcess) -> None:
    for path in ("/v2/chat", "/chat", "/favicon.ico"):  # /api/ is Ollama's door
        r = httpx.post(model_server.url + path, json={})
        assert r.status_code == 404, (path, r.status_code, r.text)
    r = httpx.post(model_server.url + "/v1/audio/speech", json={})
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param",
                                                               "code"}
