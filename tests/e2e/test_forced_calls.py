"""A forced call is one call unless the request asks for more (issue 30, item 2), on the real
bundled model through each official client: a named tool_choice yields exactly one call,
`required`/`any` one unless parallel calls are asked for explicitly, `auto` one by the
server's default; with several allowed, no answer repeats a call and none runs to
max_tokens for it. finish_reason tool_calls / stop_reason tool_use / Responses completed;
the openai SDK's chat.completions.stream() helper and the OpenAI Agents SDK's Responses model
with a function tool, which both failed on repeated calls."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import ollama
import openai
import pytest
from pydantic import BaseModel

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

MODEL = "SmolLM2-135M-Instruct"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
           "required": ["city"]}
TOOLS: Any = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": WEATHER}}]
ASK: Any = [{"role": "user", "content": "What is the weather in Paris, London and Rome?"}]
RUNS = [{"temperature": 0}, *({"temperature": 1.0, "seed": s} for s in range(3))]


def sdk(server: ServerProcess) -> openai.OpenAI:
    c = closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                        max_retries=0,
                                        timeout=300))
    return c


@pytest.mark.parametrize("choice", [{"type": "function", "function": {"name": "get_weather"}},
                                    "required", "auto"])
def test_openai_chat_forced_or_not_is_one_call(model_server: ServerProcess,
                                               choice: Any) -> None:
    c = sdk(model_server)
    for run in RUNS:
        args: Any = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": choice,
                     "max_tokens": 200, **run}
        if choice == {"type": "function", "function": {"name": "get_weather"}}:
            args["parallel_tool_calls"] = True  # a named function is one call even so
        whole = c.chat.completions.create(**args).choices[0]
        if choice != "auto" or whole.message.tool_calls:
            assert whole.finish_reason == "tool_calls"
            assert len(whole.message.tool_calls or []) == 1
        indexes = set()
        finish = None
        for chunk in c.chat.completions.create(**args, stream=True):
            for ch in chunk.choices:
                indexes |= {d.index for d in ch.delta.tool_calls or []}
                finish = ch.finish_reason or finish
        assert len(indexes) <= 1
        assert finish == "tool_calls" if choice != "auto" or indexes else finish is not None


def test_parallel_calls_asked_for_end_where_the_model_repeats_one(
        model_server: ServerProcess) -> None:
    c = sdk(model_server)
    for run in RUNS:
        choice = c.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=True, max_tokens=400, **run).choices[0]
        assert choice.finish_reason == "tool_calls"
        made = [(t.function.name, json.loads(t.function.arguments))  # type: ignore[union-attr]
                for t in choice.message.tool_calls or []]
        assert made and all(m not in made[:i] for i, m in enumerate(made))


class Weather(BaseModel):
    city: str


def test_the_openai_sdk_stream_helper_with_a_named_tool(model_server: ServerProcess) -> None:
    """client.chat.completions.stream() with a named tool: it raised LengthFinishReasonError
    when the call repeated until max_tokens."""
    c = sdk(model_server)
    with c.chat.completions.stream(
            model=MODEL, messages=ASK, tools=[openai.pydantic_function_tool(Weather)],
            tool_choice={"type": "function", "function": {"name": "Weather"}},
            max_tokens=200, temperature=0) as stream:
        final = stream.get_final_completion()
    [choice] = final.choices
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert isinstance(call.function.parsed_arguments, Weather)  # type: ignore[union-attr]


@pytest.mark.parametrize("choice", [{"type": "tool", "name": "get_weather"}, {"type": "any"}])
def test_anthropic_forced_is_one_tool_use(model_server: ServerProcess, choice: Any) -> None:
    with anthropic.Anthropic(base_url=model_server.url, api_key="unused", max_retries=0,
                             timeout=300) as c:
        for run in ({k: v for k, v in r.items() if k != "seed"} for r in RUNS):
            args: Any = {"model": MODEL, "max_tokens": 200, "messages": ASK,
                         "tools": [{"name": "get_weather", "description": "The weather",
                                    "input_schema": WEATHER}],
                         "tool_choice": choice, "extra_body": run}
            m = c.messages.create(**args)
            assert m.stop_reason == "tool_use"
            assert [b.type for b in m.content].count("tool_use") == 1
            with c.messages.stream(**args) as stream:
                final = stream.get_final_message()
            assert final.stop_reason == "tool_use"
            assert [b.type for b in final.content].count("tool_use") == 1


def test_ollama_and_tokenpipe_v1_make_one_call_by_default(model_server: ServerProcess) -> None:
    c = ollama.Client(host=model_server.url, timeout=300)
    closed_after_test(c._client)
    for run in RUNS:
        r = c.chat(model=MODEL, tools=TOOLS, messages=ASK,
                   options={"num_predict": 200, **run})
        assert len(r.message.tool_calls or []) <= 1 and r.done_reason == "stop"


async def test_tokenpipe_v1_required_is_one_call(model_server: ServerProcess) -> None:
    async with Client(model_server.ws_url) as client:
        gen = await client.generate(ASK, params={"tools": TOOLS, "tool_choice": "required",
                                                 "max_tokens": 200, "temperature": 0})
        await gen.collect()
    assert gen.end is not None and gen.end["finish_reason"] == "tool_calls"


def test_responses_required_is_one_function_call(model_server: ServerProcess) -> None:
    r = sdk(model_server).responses.create(
        model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=200,
        tool_choice="required", store=False,
        tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER,
                "strict": False}])
    assert r.status == "completed"
    assert [item.type for item in r.output].count("function_call") == 1
    assert r.parallel_tool_calls is False  # as it was applied


async def test_the_agents_sdk_responses_model_with_a_function_tool(
        model_server: ServerProcess) -> None:
    """The OpenAI Agents SDK on the Responses door: a required tool, called once, its result
    the run's final output (it raised ModelBehaviorError on repeated calls cut by length)."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    called: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        called.append(city)
        return f"Sunny in {city}"

    client = openai.AsyncOpenAI(base_url=model_server.url + "/v1", api_key="unused",
                                max_retries=0, timeout=300)
    agent = Agent(name="weather", instructions="Answer with the weather tool.",
                  tools=[get_weather], tool_use_behavior="stop_on_first_tool",
                  model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                  model_settings=ModelSettings(tool_choice="required", temperature=0,
                                               max_tokens=200))
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=2)
    await client.close()
    assert len(called) == 1
    assert result.final_output == f"Sunny in {called[0]}"
