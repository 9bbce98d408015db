"""Structured output, tool calls and thinking through Ollama's API (docs/protocol.md section
4), with the official `ollama` package: on the real bundled model, `format` (a schema,
"json") on chat and generate, `tools` (dicts, and a Python function the package converts)
answered with `message.tool_calls` whose arguments validate, each call streamed whole in
one line, a tool result read back; on the fake engine, `think` (the fake engine writes the
think tags it is asked to echo)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import ollama
import pytest

from tests.conftest import ServerProcess

pytestmark = pytest.mark.e2e

MODEL = "smollm2"
GREEDY: Any = {"temperature": 0, "num_predict": 150}
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 30}, "age": {"type": "integer", "minimum": 0,
                                                         "maximum": 150}},
    "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"], "additionalProperties": False}
TOOLS: Any = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": WEATHER}}]
# what the package sends of them: its Tool model keeps type, items, description and enum of
# each property, so maxLength and additionalProperties never reach the server
SENT: Any = [ollama.Tool.model_validate(t).model_dump(exclude_none=True) for t in TOOLS]
SENT_SCHEMA = SENT[0]["function"]["parameters"]
# Ollama has no tool_choice, and the 135M model answers a bare question in text; one earlier
# call in the history (which maps the history's tool_calls too) makes it call
ASK: Any = [{"role": "user", "content": "What is the weather in Rome?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather",
                              "arguments": {"city": "Rome", "unit": "C"}}}]},
            {"role": "user", "content": "What is the weather in Paris?"}]
_OPEN: list[ollama.Client] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop()._client.close()  # the package's Client has no close() of its own


def client(server: ServerProcess) -> ollama.Client:
    c = ollama.Client(host=server.url, timeout=120)
    _OPEN.append(c)
    return c


@pytest.mark.model
def test_format_schema_and_json_on_chat_and_generate(model_server: ServerProcess) -> None:
    c = client(model_server)
    ask: Any = [{"role": "user", "content": "Invent a person: a name and an age."}]
    whole = c.chat(model=MODEL, messages=ask, format=PERSON, options=GREEDY)
    jsonschema.validate(json.loads(whole.message.content or ""), PERSON)
    assert whole.done_reason == "stop"
    pieces = [p.message.content or "" for p in c.chat(model=MODEL, messages=ask,
                                                      format=PERSON, options=GREEDY,
                                                      stream=True)]
    assert len(pieces) > 3 and "".join(pieces) == whole.message.content  # token by token
    anything = c.chat(model=MODEL, messages=ask, format="json", options=GREEDY)
    assert isinstance(json.loads(anything.message.content or ""), dict)
    generated = c.generate(model=MODEL, prompt="Invent a person.", format=PERSON,
                           options=GREEDY)
    jsonschema.validate(json.loads(generated.response), PERSON)


def check_calls(calls: Any, schema: dict[str, Any], name: str = "get_weather") -> None:
    assert calls
    for call in calls:
        assert call.function.name == name
        assert isinstance(call.function.arguments, dict)
        jsonschema.validate(dict(call.function.arguments), schema)


@pytest.mark.model
def test_tools_answer_tool_calls_whole_and_streamed(model_server: ServerProcess) -> None:
    c = client(model_server)
    whole = c.chat(model=MODEL, messages=ASK, tools=TOOLS, options=GREEDY)
    check_calls(whole.message.tool_calls, SENT_SCHEMA)
    assert whole.done_reason == "stop" and not whole.message.content
    lines = [json.loads(raw) for raw in httpx.post(
        model_server.url + "/api/chat", timeout=120, json={
            "model": MODEL, "messages": ASK, "tools": SENT, "options": GREEDY}).text.splitlines()]
    with_calls = [ln for ln in lines if ln["message"].get("tool_calls")]
    # each call whole, in one line: arguments an object, never fragments
    assert [call for ln in with_calls for call in ln["message"]["tool_calls"]] == [
        {"function": {"name": t.function.name, "arguments": dict(t.function.arguments)}}
        for t in whole.message.tool_calls or []]
    assert all(len(ln["message"]["tool_calls"]) == 1 for ln in with_calls)
    streamed = [call for part in c.chat(model=MODEL, messages=ASK, tools=TOOLS,
                                        options=GREEDY, stream=True)
                for call in part.message.tool_calls or []]
    assert [(t.function.name, t.function.arguments) for t in streamed] == [
        (t.function.name, t.function.arguments) for t in whole.message.tool_calls or []]


def get_weather(city: str, unit: str) -> str:
    """The current weather in a city.

    Args:
      city: the city's name
      unit: C or F
    """
    return "sunny"


@pytest.mark.model
def test_a_python_function_as_a_tool_and_its_result(model_server: ServerProcess) -> None:
    c = client(model_server)
    first = c.chat(model=MODEL, messages=ASK, tools=[get_weather], options=GREEDY)
    sent = ollama._utils.convert_function_to_tool(get_weather).model_dump(exclude_none=True)
    check_calls(first.message.tool_calls, sent["function"]["parameters"])
    call = (first.message.tool_calls or [])[0]
    history: Any = [*ASK, first.message,
                    {"role": "tool", "tool_name": call.function.name,
                     "content": get_weather(**call.function.arguments)}]
    final = c.chat(model=MODEL, messages=history, tools=[get_weather],
                   options={**GREEDY, "num_predict": 30})
    assert final.done and final.prompt_eval_count is not None
    assert first.prompt_eval_count is not None
    assert final.prompt_eval_count > first.prompt_eval_count + 10  # the call and result read


THINK: Any = [{"role": "user", "content": "[[echo]]<think>plan this</think>the answer"}]


def test_think_is_ollamas_thinking_field(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    whole = c.chat(model="fake", messages=THINK, think=True)
    assert (whole.message.thinking, whole.message.content) == ("plan this", "the answer")
    parts = list(c.chat(model="fake", messages=THINK, think=True, stream=True))
    thoughts = [p.message.thinking for p in parts if p.message.thinking]
    assert len(thoughts) > 1 and "".join(thoughts) == "plan this"  # streamed as it comes
    assert "".join(p.message.content or "" for p in parts) == "the answer"
    last = max(i for i, p in enumerate(parts) if p.message.thinking)
    assert not any(p.message.content for p in parts[:last])  # thinking comes first
    gen = c.generate(model="fake", prompt=THINK[0]["content"], think=True)
    assert (gen.thinking, gen.response) == ("plan this", "the answer")
    gen_parts = list(c.generate(model="fake", prompt=THINK[0]["content"], think=True,
                                stream=True))
    assert "".join(p.thinking or "" for p in gen_parts) == "plan this"
    plain = c.chat(model="fake", messages=THINK)  # without think the tags stay, as written
    assert plain.message.content == "<think>plan this</think>the answer"
    assert not plain.message.thinking


@pytest.mark.model
def test_a_schema_that_cannot_be_enforced_is_a_400(model_server: ServerProcess) -> None:
    for stream in (False, True):
        with pytest.raises(ollama.ResponseError) as info:
            answer = client(model_server).chat(model=MODEL, messages=ASK, stream=stream,
                                               format={"type": "object", "properties": {
                                                   "x": {"not": {}}}})
            if stream:
                list(answer)
        assert info.value.status_code == 400 and "cannot be enforced" in info.value.error
