"""Tool use and thinking through the Anthropic Messages door (docs/protocol.md section 5),
with the official `anthropic` SDK: on the real bundled model, tools with tool_choice any /
tool whose input validates against input_schema (whole, and streamed: the SDK assembles
the input_json_delta fragments), the same call as the OpenAI door for the same greedy
request, a tool_result round trip, count_tokens with tools; on the fake engine, thinking
blocks (the fake engine writes the think tags it is asked to echo)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60}},
          "required": ["query"], "additionalProperties": False}
TOOLS: Any = [{"name": "get_weather", "description": "The current weather in a city",
               "input_schema": WEATHER},
              {"name": "search", "description": "Search the web", "input_schema": SEARCH}]
SCHEMAS = {"get_weather": WEATHER, "search": SEARCH}
GREEDY = {"temperature": 0}  # the SDK sends temperature through extra_body
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(server: ServerProcess) -> anthropic.Anthropic:
    c = closed_after_test(anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0,
                                              timeout=120))
    return c


def events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        if lines[0].startswith("event: "):
            out.append((lines[0][7:], json.loads(lines[1].removeprefix("data: "))))
    return out


def uses(message: Any) -> list[Any]:
    """The message's tool_use blocks, each checked: an id, an offered name, valid input."""
    found = [b for b in message.content if b.type == "tool_use"]
    assert found
    assert len({b.id for b in found}) == len(found)
    for b in found:
        assert b.id.startswith("toolu_")
        jsonschema.validate(b.input, SCHEMAS[b.name])
    return found


@pytest.mark.model
@pytest.mark.parametrize("choice", [{"type": "any", "disable_parallel_tool_use": True},
                                    {"type": "tool", "name": "search",
                                     "disable_parallel_tool_use": True}],
                         ids=["any", "tool"])
def test_a_required_call_validates_whole_and_streamed(model_server: ServerProcess,
                                                      choice: Any) -> None:
    c = client(model_server)
    args: Any = {"model": MODEL, "max_tokens": 150, "messages": ASK, "tools": TOOLS,
                 "tool_choice": choice}
    whole = c.messages.create(**args, extra_body=GREEDY)
    assert whole.stop_reason == "tool_use" and whole.stop_sequence is None
    (call,) = uses(whole)  # disable_parallel_tool_use: one call
    if choice["type"] == "tool":
        assert call.name == "search"
    with c.messages.stream(**args, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    (streamed,) = uses(final)  # the SDK assembled the input from input_json_delta
    assert (streamed.name, streamed.input) == (call.name, call.input)  # greedy: the same
    assert final.stop_reason == "tool_use"
    # on the wire: a tool_use block opened with empty input, then partial_json fragments
    r = httpx.post(model_server.url + "/v1/messages", json={**args, **GREEDY, "stream": True},
                   timeout=120)
    got = events(r.text)
    start = next(d for n, d in got if n == "content_block_start")
    assert start["content_block"] == {"type": "tool_use", "id": start["content_block"]["id"],
                                      "name": call.name, "input": {}}
    fragments = [d["delta"]["partial_json"] for n, d in got if n == "content_block_delta"]
    assert len(fragments) > 1 and json.loads("".join(fragments)) == call.input
    # the OpenAI door makes the same call of the same greedy request
    oai = closed_after_test(openai.OpenAI(base_url=model_server.url + "/v1", api_key="x",
                                          max_retries=0))
    named = ("required" if choice["type"] == "any"
             else {"type": "function", "function": {"name": "search"}})
    chat = oai.chat.completions.create(
        model=MODEL, messages=ASK, temperature=0, max_tokens=150, parallel_tool_calls=False,
        tool_choice=named, tools=[{"type": "function", "function": {
            "name": t["name"], "description": t["description"],
            "parameters": t["input_schema"]}} for t in TOOLS])
    (fn,) = chat.choices[0].message.tool_calls or []
    assert (fn.function.name, json.loads(fn.function.arguments)) == (call.name, call.input)


@pytest.mark.model
def test_a_tool_result_round_trip(model_server: ServerProcess) -> None:
    c = client(model_server)
    first = c.messages.create(model=MODEL, max_tokens=150, messages=ASK, tools=TOOLS,
                              extra_body=GREEDY, tool_choice={"type": "tool", "name": "get_weather",
                                                          "disable_parallel_tool_use": True})
    (call,) = uses(first)
    history: Any = [*ASK, {"role": "assistant", "content": first.content},  # as SDK docs do
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                  "content": json.dumps({"temperature": 21})}]}]
    final = c.messages.create(model=MODEL, max_tokens=40, messages=history, tools=TOOLS,
                              extra_body=GREEDY)
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    alone = c.messages.count_tokens(model=MODEL, messages=ASK, tools=TOOLS)
    counted = c.messages.count_tokens(model=MODEL, messages=history, tools=TOOLS)
    assert counted.input_tokens == final.usage.input_tokens + (
        final.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens > alone.input_tokens + 20  # the call and its result read
    bare = c.messages.count_tokens(model=MODEL, messages=ASK)
    assert alone.input_tokens > bare.input_tokens  # the tools are in the prompt
    with pytest.raises(anthropic.BadRequestError) as info:  # a result of no call
        c.messages.create(model=MODEL, max_tokens=5, tools=TOOLS, messages=[
            *ASK, {"role": "user", "content": [{"type": "tool_result",
                                                "tool_use_id": "toolu_nope"}]}])
    assert "tool_use_id" in info.value.message


THINK: Any = [{"role": "user", "content": "[[echo]]<think>plan this</think>the answer"}]


def test_thinking_is_a_thinking_block_whole_and_streamed(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    args: Any = {"model": "fake", "max_tokens": 100, "messages": THINK,
                 "thinking": {"type": "enabled", "budget_tokens": 1024}}
    whole = c.messages.create(**args)
    assert [b.type for b in whole.content] == ["thinking", "text"]
    assert whole.content[0].thinking == "plan this"  # type: ignore[union-attr]
    assert whole.content[0].signature == ""  # type: ignore[union-attr]
    assert whole.content[1].text == "the answer"  # type: ignore[union-attr]
    with c.messages.stream(**args) as stream:
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    r = httpx.post(fake_server.url + "/v1/messages", json={**args, "stream": True}, timeout=30)
    got = events(r.text)
    kinds = [d["delta"]["type"] for n, d in got if n == "content_block_delta"]
    assert kinds == sorted(kinds, key=lambda k: k != "thinking_delta")  # thinking first
    assert {d["index"]: d["content_block"]["type"] for n, d in got
            if n == "content_block_start"} == {0: "thinking", 1: "text"}
    # thinking blocks sent back are dropped from the prompt; without thinking the tags stay
    again = c.messages.create(model="fake", max_tokens=100, messages=[
        *THINK, {"role": "assistant", "content": [b.model_dump() for b in whole.content]},
        {"role": "user", "content": "[[echo]]<think>x</think>y"}])
    assert [(b.type, b.text) for b in again.content] == [  # type: ignore[union-attr]
        ("text", "<think>x</think>y")]
    counted = c.messages.count_tokens(model="fake", messages=[
        *THINK, {"role": "assistant", "content": [b.model_dump() for b in whole.content]},
        {"role": "user", "content": "q"}])
    without = c.messages.count_tokens(model="fake", messages=[
        *THINK, {"role": "assistant", "content": "the answer"}, {"role": "user", "content": "q"}])
    assert counted.input_tokens == without.input_tokens


@pytest.mark.model
def test_a_schema_that_cannot_be_enforced_is_a_400(model_server: ServerProcess) -> None:
    bad: Any = [{"name": "f", "input_schema": {"type": "object", "properties": {
        "x": {"not": {}}}}}]
    with pytest.raises(anthropic.BadRequestError) as info:
        client(model_server).messages.create(model=MODEL, max_tokens=5, messages=ASK,
                                             tools=bad)
    error: Any = info.value.body
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith("tools: the output format cannot be enforced")
