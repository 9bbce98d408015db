"""Function tools on the Responses door, on the real bundled model through the official
openai SDK: `responses.create(tools=...)` whole and streamed gives the same calls (greedy)
as function_call items whose arguments validate, with the events OpenAI sends
(output_item.added, function_call_arguments.delta / .done, output_item.done); the call and
its output go back as input items, directly or through previous_response_id, and reach the
model as the chat door's tool history does; the OpenAI Agents SDK runs a real function
tool end to end."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from tests.conftest import ServerProcess, running

pytestmark = [pytest.mark.e2e, pytest.mark.model]

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60}},
          "required": ["query"], "additionalProperties": False}
TOOLS: Any = [
    {"type": "function", "name": "get_weather", "description": "The current weather in a city",
     "parameters": WEATHER, "strict": True},
    {"type": "function", "name": "search", "description": "Search the web",
     "parameters": SEARCH, "strict": True},
]
SCHEMAS = {"get_weather": WEATHER, "search": SEARCH}
ASK = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if not os.environ.get("CI"):  # in CI a missing model is a failure, not a skip
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    db = tmp_path_factory.mktemp("responses") / "r.sqlite3"
    with running(ServerProcess(("--parallel", "2", "--responses-db", str(db)))) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0,
                       timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def model(oai: openai.OpenAI) -> str:
    return oai.models.list().data[0].id


def calls_of(response: Any) -> list[tuple[str, Any]]:
    return [(i.name, json.loads(i.arguments)) for i in response.output
            if i.type == "function_call"]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "search"},
                                    "auto"], ids=["required", "named", "auto"])
def test_calls_whole_and_streamed_are_the_same_function_call_items(
        oai: openai.OpenAI, model: str, choice: Any) -> None:
    kwargs: Any = {"model": model, "input": ASK, "tools": TOOLS, "tool_choice": choice,
                   "parallel_tool_calls": False, "temperature": 0, "max_output_tokens": 120}
    whole = oai.responses.create(**kwargs)
    # auto: the small model may answer in text, which 120 tokens can cut
    assert whole.status == "completed" or (choice == "auto" and whole.status == "incomplete")
    assert whole.tools and whole.tools[0].name == "get_weather"  # echoed
    calls = calls_of(whole)
    if choice != "auto":
        assert len(calls) == 1 and not whole.output_text
        assert [i.type for i in whole.output] == ["function_call"]
    if isinstance(choice, dict):
        assert calls[0][0] == "search"
    for name, arguments in calls:
        jsonschema.validate(arguments, SCHEMAS[name])
    for item in whole.output:
        if item.type == "function_call":
            assert item.call_id.startswith("call_") and item.id.startswith("fc_")
            assert item.status == "completed"

    with oai.responses.stream(**kwargs) as stream:
        events = list(stream)
    final = events[-1].response  # type: ignore[union-attr]  # completed or incomplete
    assert final.status == whole.status
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(numbers)))
    assert calls_of(final) == calls  # greedy: the same calls
    assert final.output_text == whole.output_text
    for index, item in enumerate(final.output):
        if item.type != "function_call":
            continue
        mine = [e for e in events if getattr(e, "output_index", None) == index]
        kinds = [e.type for e in mine]
        assert kinds[0] == "response.output_item.added"
        assert mine[0].item.name == item.name and mine[0].item.call_id == item.call_id
        assert kinds[-2:] == ["response.function_call_arguments.done",
                              "response.output_item.done"]
        assert set(kinds[1:-2]) == {"response.function_call_arguments.delta"}
        assert "".join(e.delta for e in mine[1:-2]) == mine[-2].arguments == item.arguments
    assert events[-1].type == f"response.{whole.status}"


def test_a_call_and_its_output_continue_as_chat_does(oai: openai.OpenAI, model: str) -> None:
    """The function_call_output goes back as an input item, with the call, or through
    previous_response_id: either way the model reads the same prompt as the chat door's
    assistant tool_calls turn plus a tool turn."""
    first = oai.responses.create(model=model, input=ASK, tools=TOOLS, temperature=0,
                                 tool_choice={"type": "function", "name": "get_weather"},
                                 parallel_tool_calls=False, max_output_tokens=120)
    [call] = [i for i in first.output if i.type == "function_call"]
    result = json.dumps({"temperature": 21, "sky": "sunny"})
    output: Any = {"type": "function_call_output", "call_id": call.call_id, "output": result}
    common: Any = {"model": model, "tools": TOOLS, "tool_choice": "none", "temperature": 0,
                   "max_output_tokens": 30}
    chained = oai.responses.create(input=[output], previous_response_id=first.id, **common)
    replayed = oai.responses.create(
        input=[{"role": "user", "content": ASK}, call.model_dump(exclude_none=True), output],
        **common)
    chat = oai.chat.completions.create(
        model=model, temperature=0, max_tokens=30, tool_choice="none",
        tools=[{"type": "function", "function": {k: t[k] for k in (
            "name", "description", "parameters")}} for t in TOOLS],
        messages=[{"role": "user", "content": ASK},
                  {"role": "assistant", "content": None, "tool_calls": [{
                      "id": call.call_id, "type": "function", "function": {
                          "name": call.name, "arguments": call.arguments}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": result}])
    assert chat.usage is not None and chained.usage is not None and replayed.usage is not None
    assert chained.usage.input_tokens == replayed.usage.input_tokens == chat.usage.prompt_tokens
    assert chained.output_text == replayed.output_text == chat.choices[0].message.content
    assert not calls_of(chained)
    # stored like text: retrieved whole, its input items listed in order
    got = oai.responses.retrieve(first.id)
    assert calls_of(got) == calls_of(first)
    items = oai.responses.input_items.list(chained.id, order="asc").data
    assert [i.type for i in items] == ["function_call_output"]


def test_the_agents_sdk_runs_a_real_function_tool(server: ServerProcess, model: str) -> None:
    import agents  # the test extra: a missing one fails, never skips

    agents.set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    seen: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        seen.append(city)
        return json.dumps({"city": city, "temperature": 21, "sky": "sunny"})

    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    # The first turn must call (tool_choice required); the SDK then resets tool_choice
    # (reset_tool_choice), so the second turn reads the result and answers in text.
    agent = agents.Agent(
        name="weather", instructions="Answer with the weather tool.", tools=[get_weather],
        model=agents.OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=agents.ModelSettings(temperature=0, max_tokens=80,
                                            tool_choice="required",
                                            parallel_tool_calls=False))

    async def run() -> tuple[Any, Any, list[str]]:
        whole = await agents.Runner.run(agent, ASK, max_turns=4)
        streamed = agents.Runner.run_streamed(agent, ASK, max_turns=4)
        kinds = [e.item.type async for e in streamed.stream_events()
                 if e.type == "run_item_stream_event"]
        await client.close()
        return whole, streamed, kinds

    whole, streamed, kinds = asyncio.run(run())
    assert len(seen) == 2 and all(seen)  # the function ran, once per run, with a city
    for result in (whole, streamed):  # call, its output, then the model's text answer
        assert [type(i).__name__ for i in result.new_items] == [
            "ToolCallItem", "ToolCallOutputItem", "MessageOutputItem"]
        assert isinstance(result.final_output, str) and result.final_output.strip()
    assert whole.final_output == streamed.final_output  # greedy
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]


def test_a_background_response_with_a_call_resumed_equals_the_foreground_one(
        oai: openai.OpenAI, model: str) -> None:
    kwargs: Any = {"model": model, "input": ASK, "tools": TOOLS, "tool_choice": "required",
                   "parallel_tool_calls": False, "temperature": 0, "max_output_tokens": 120}
    foreground = oai.responses.create(**kwargs)
    first: list[Any] = []
    with oai.responses.create(background=True, stream=True, **kwargs) as stream:
        for event in stream:
            first.append(event)
            if event.type == "response.function_call_arguments.delta":
                break  # dropped inside the call's arguments
    rest = list(oai.responses.retrieve(first[0].response.id, stream=True,
                                       starting_after=first[-1].sequence_number))
    events = first + rest
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.status == "completed" and final.background
    assert calls_of(final) == calls_of(foreground)
    deltas = "".join(e.delta for e in events
                     if e.type == "response.function_call_arguments.delta")
    assert deltas == final.output[0].arguments
