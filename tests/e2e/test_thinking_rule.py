"""One rule for asking a model to think, the same on every door (docs/protocol.md, "Asking
a model to think"): Chat Completions `reasoning_effort`, Responses `reasoning.effort`,
Anthropic `thinking`, Ollama `think`, tokenpipe.v1 `think`. The bundled SmolLM2, whose chat
template has no thinking section, answers each with a 400 naming the door's field, in
Ollama's words (`"..." does not support thinking`), whole or streamed, and serves the same
request that does not ask. Behind a chat template that opens a thinking section the same
model can think: asked through every door with its official client, its section arrives
in that door's own field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test, running
from tests.e2e.test_reasoning import THINKING_TEMPLATE
from tokenpipe.client import Client, ServerError

pytestmark = [pytest.mark.e2e, pytest.mark.model]

MODEL = "SmolLM2-135M-Instruct"
ASK: Any = [{"role": "user", "content": "What is 2 + 2?"}]
REFUSED = f'"{MODEL}" does not support thinking'


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The bundled model behind a chat template whose generation prompt opens <think>."""
    template = tmp_path_factory.mktemp("thinking") / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    with running(ServerProcess(("--chat-template", str(template), "--parallel", "2"))
                 ) as server:
        yield server


def oai(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                           max_retries=0, timeout=120))


def ant(server: ServerProcess) -> anthropic.Anthropic:
    return closed_after_test(anthropic.Anthropic(base_url=server.url, api_key="unused",
                                                 max_retries=0, timeout=120))


def olm(server: ServerProcess) -> ollama.Client:
    return closed_after_test(ollama.Client(host=server.url, timeout=120))


@pytest.mark.parametrize("stream", [False, True])
def test_every_door_refuses_a_model_that_cannot_think_naming_its_field(
        model_server: ServerProcess, stream: bool) -> None:
    c = oai(model_server)
    with pytest.raises(openai.BadRequestError) as chat:
        c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8,
                                  reasoning_effort="low", stream=stream)
    assert chat.value.body["param"] == "reasoning_effort"  # type: ignore[index]
    assert chat.value.body["message"].startswith(REFUSED)  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as responses:
        c.responses.create(model=MODEL, input="What is 2 + 2?", max_output_tokens=8,
                           reasoning={"effort": "high"}, stream=stream)
    assert responses.value.body["param"] == "reasoning.effort"  # type: ignore[index]
    assert REFUSED in str(responses.value)
    for thinking in ({"type": "enabled", "budget_tokens": 16}, {"type": "adaptive"}):
        with pytest.raises(anthropic.BadRequestError) as messages:
            ant(model_server).messages.create(model=MODEL, max_tokens=32, messages=ASK,
                                              thinking=thinking,  # type: ignore[arg-type]
                                              stream=stream)
        said = messages.value.body["error"]["message"]  # type: ignore[index]
        assert said.startswith(f"thinking: {REFUSED}")
    for think in (True, "high"):
        with pytest.raises(ollama.ResponseError) as native:
            reply = olm(model_server).chat(model="smollm2", messages=ASK, think=think,
                                           stream=stream)
            if stream:
                list(reply)  # type: ignore[arg-type]
        assert native.value.status_code == 400 and native.value.error.startswith(REFUSED)
    generate = httpx.post(model_server.url + "/api/generate", timeout=60, json={
        "model": "smollm2", "prompt": "2 + 2?", "think": True, "stream": stream})
    assert generate.status_code == 400 and generate.json()["error"].startswith(REFUSED)


async def test_tokenpipe_v1_refuses_think_on_a_model_that_cannot(
        model_server: ServerProcess) -> None:
    async with Client(model_server.ws_url) as client:
        asked = await client.generate(ASK, params={"think": True, "max_tokens": 8})
        with pytest.raises(ServerError) as refused:
            await asked.collect()
        assert refused.value.code == "bad_request"
        assert refused.value.message.startswith(f"field 'params.think': {REFUSED}")
        plain = await client.generate(ASK, params={"max_tokens": 4})  # not asked: served
        assert await plain.collect() and plain.end is not None


def test_not_asking_is_served_as_before(model_server: ServerProcess) -> None:
    """Each door's way of not asking passes on the model that cannot think."""
    c = oai(model_server)
    chat = c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4,
                                     reasoning_effort="none")
    assert chat.choices[0].message.content
    answer = c.responses.create(model=MODEL, input="What is 2 + 2?", max_output_tokens=4,
                                reasoning={"effort": None})
    assert answer.output_text
    message = ant(model_server).messages.create(model=MODEL, max_tokens=4, messages=ASK,
                                                thinking={"type": "disabled"})
    assert message.content
    assert olm(model_server).chat(model="smollm2", messages=ASK, think=False,
                                  options={"num_predict": 4}).message.content
    shown = olm(model_server).show("smollm2")
    assert shown.capabilities is not None and "thinking" not in shown.capabilities


def test_a_model_that_can_think_is_asked_through_every_http_door(
        thinking_server: ServerProcess) -> None:
    """The template opens the section: what the 135M model writes before a </think> (here,
    with 24 tokens, all of it) is its thinking, in each door's field."""
    c = oai(thinking_server)
    chat = c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=24, temperature=0,
                                     reasoning_effort="medium")
    assert getattr(chat.choices[0].message, "reasoning_content", None)
    thought = ""
    with c.responses.stream(model=MODEL, input="What is 2 + 2?", max_output_tokens=24,
                            temperature=0, reasoning={"effort": "low"}) as events:
        for event in events:
            if event.type == "response.reasoning_text.delta":
                thought += event.delta
        final = events.get_final_response()
    item = final.output[0]
    assert item.type == "reasoning" and item.content is not None
    assert item.content[0].text == thought and thought
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens > 0
    again = c.responses.create(model=MODEL, max_output_tokens=8, temperature=0,
                               reasoning={"effort": "low"}, input=[
                                   {"role": "user", "content": "What is 2 + 2?"},
                                   *[o.model_dump(exclude_none=True) for o in final.output],
                                   {"role": "user", "content": "And 3 + 3?"}])
    assert again.status in ("completed", "incomplete")  # its reasoning item was taken back
    message = ant(thinking_server).messages.create(
        model=MODEL, max_tokens=24, messages=ASK, thinking={"type": "adaptive"},
        extra_body={"temperature": 0})  # this SDK takes temperature only there
    assert message.content[0].type == "thinking" and message.content[0].thinking
    native = olm(thinking_server).chat(model="smollm2", messages=ASK, think=True,
                                       options={"num_predict": 24, "temperature": 0})
    assert native.message.thinking
    shown = olm(thinking_server).show("smollm2")
    assert shown.capabilities is not None and "thinking" in shown.capabilities
    cards = httpx.get(thinking_server.url + "/v1/models", timeout=10).json()["data"]
    assert "thinking" in cards[0]["capabilities"]


async def test_a_model_that_can_think_is_asked_over_tokenpipe_v1(
        thinking_server: ServerProcess) -> None:
    async with Client(thinking_server.ws_url) as client:
        asked = await client.generate(ASK, params={"think": True, "reasoning_format": "auto",
                                                   "max_tokens": 24})
        await asked.collect()
        assert any(d.get("channel") == "reasoning" for d in asked.deltas)

