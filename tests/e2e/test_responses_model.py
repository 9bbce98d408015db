"""The Responses door on the real bundled model: the greedy text equals the Chat
Completions door's, whole and streamed; previous_response_id continues the conversation
as chat would with every turn sent; a seeded background response dropped and resumed
equals an uninterrupted run; the OpenAI Agents SDK (its default Responses model) answers,
run whole and streamed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conftest import ServerProcess, running

pytestmark = [pytest.mark.e2e, pytest.mark.model]
SYSTEM, QUESTION = "You answer in one short sentence.", "Name three colours."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if not os.environ.get("CI"):  # in CI a missing model is a failure, not a skip
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    db = tmp_path_factory.mktemp("responses") / "r.sqlite3"
    # split: the test compares answers across requests (docs/determinism.md)
    with running(ServerProcess(("--parallel", "2", "--kv-cache", "split",
                                "--responses-db", str(db)))) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def model(oai: openai.OpenAI) -> str:
    return oai.models.list().data[0].id


def test_greedy_text_equals_chat_completions(oai: openai.OpenAI, model: str) -> None:
    chat = oai.chat.completions.create(model=model, temperature=0, max_tokens=24, messages=[
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])
    kwargs: Any = {"model": model, "temperature": 0, "max_output_tokens": 24,
                   "instructions": SYSTEM, "input": QUESTION}
    whole = oai.responses.create(**kwargs)
    with oai.responses.stream(**kwargs) as stream:
        events = list(stream)
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    # the last event's response (get_final_response() takes response.completed only, and
    # 24 tokens may cut the answer: response.incomplete)
    final = events[-1].response  # type: ignore[union-attr]
    assert chat.choices[0].message.content
    assert whole.output_text == streamed == final.output_text == chat.choices[0].message.content
    assert chat.usage is not None
    for usage in (whole.usage, final.usage):
        assert usage is not None and usage.input_tokens == chat.usage.prompt_tokens
        assert usage.output_tokens == chat.usage.completion_tokens
    status = {"stop": "completed", "length": "incomplete"}[chat.choices[0].finish_reason]
    assert whole.status == final.status == status


def test_previous_response_id_is_the_whole_conversation(oai: openai.OpenAI, model: str) -> None:
    first = oai.responses.create(model=model, temperature=0, max_output_tokens=16,
                                 instructions=SYSTEM, input=QUESTION)
    second = oai.responses.create(model=model, temperature=0, max_output_tokens=16,
                                  instructions=SYSTEM, input="And one more?",
                                  previous_response_id=first.id)
    chat = oai.chat.completions.create(model=model, temperature=0, max_tokens=16, messages=[
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And one more?"}])
    assert second.output_text == chat.choices[0].message.content
    assert chat.usage is not None and second.usage is not None
    assert second.usage.input_tokens == chat.usage.prompt_tokens


def test_seeded_background_resumed_equals_an_uninterrupted_run(oai: openai.OpenAI,
                                                               model: str) -> None:
    kwargs: Any = {"model": model, "input": "Write a short poem about the sea.",
                   "temperature": 0.9, "max_output_tokens": 40, "extra_body": {"seed": 7}}
    uninterrupted = oai.responses.create(**kwargs)
    first: list[Any] = []
    stream = oai.responses.create(**kwargs, background=True, stream=True)
    for event in stream:
        first.append(event)
        if sum(e.type == "response.output_text.delta" for e in first) == 3:
            break
    stream.close()
    rest = list(oai.responses.retrieve(first[0].response.id, stream=True,
                                       starting_after=first[-1].sequence_number))
    numbers = [e.sequence_number for e in first + rest]
    assert numbers == list(range(len(numbers)))
    text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
    assert text == uninterrupted.output_text == rest[-1].response.output_text
    assert len(text) > 20


def test_openai_agents_sdk_answers(server: ServerProcess, model: str,
                                   oai: openai.OpenAI) -> None:
    import agents  # the test extra: a missing one fails, never skips
    agents.set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    agent = agents.Agent(
        name="terse", instructions=SYSTEM,
        model=agents.OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=agents.ModelSettings(temperature=0, max_tokens=64))
    # an answer cut by max_tokens is a failure to the Agents SDK: one the model ends itself
    reference = oai.responses.create(model=model, temperature=0, max_output_tokens=64,
                                     instructions=SYSTEM, input=QUESTION)
    assert reference.status == "completed"
    expected = reference.output_text

    async def run() -> tuple[str, str, list[str]]:
        whole = await agents.Runner.run(agent, QUESTION)
        streamed = agents.Runner.run_streamed(agent, QUESTION)
        deltas = [e.data.delta async for e in streamed.stream_events()
                  if e.type == "raw_response_event"
                  and e.data.type == "response.output_text.delta"]
        await client.close()
        return whole.final_output, streamed.final_output, deltas

    import asyncio

    whole, streamed, deltas = asyncio.run(run())
    assert whole == streamed == "".join(deltas) == expected
    assert len(deltas) > 3  # token by token
