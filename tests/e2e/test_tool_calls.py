"""Tool calls (issue 17, item 2) on a real server with the real bundled model: every call
is generated under a grammar of the offered functions, so its name is one of theirs and its
arguments parse and validate, whole and streamed, whatever the chunk boundaries; streamed
as OpenAI does (the first delta of a call has index, id, type and name; the next ones index
and argument fragments); through the official openai SDK, LangChain and tokenpipe.v1."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

MODEL = "SmolLM2-135M-Instruct"
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["C", "F"]}},
    "required": ["city", "unit"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60}},
          "required": ["query"], "additionalProperties": False}
TOOLS: Any = [
    {"type": "function", "function": {"name": "get_weather", "description":
                                      "The current weather in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "search", "description": "Search the web",
                                      "parameters": SEARCH}},
]
SCHEMAS = {"get_weather": WEATHER, "search": SEARCH}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                           max_retries=0,
                                           timeout=120))


def check_calls(calls: list[tuple[str, str, str]]) -> None:
    """Each call: an id, an offered name, arguments valid for that function's schema."""
    assert calls
    assert len({call_id for call_id, _, _ in calls}) == len(calls)
    for call_id, name, arguments in calls:
        assert call_id.startswith("call_")
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def whole(c: openai.OpenAI, **args: Any) -> Any:
    args.setdefault("max_tokens", 150)
    return c.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, temperature=0,
                                     **args).choices[0]


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "search"}}],
                         ids=["required", "named"])
def test_a_required_call_is_well_formed_whole_and_streamed(model_server: ServerProcess,
                                                           choice: Any) -> None:
    c = sdk(model_server)
    answer = whole(c, tool_choice=choice, parallel_tool_calls=False)
    assert answer.finish_reason == "tool_calls"
    assert answer.message.content is None
    calls = [(t.id, t.function.name, t.function.arguments)
             for t in answer.message.tool_calls or []]
    assert len(calls) == 1  # parallel_tool_calls false: one call
    check_calls(calls)
    if isinstance(choice, dict):
        assert calls[0][1] == "search"

    chunks = list(c.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                            tool_choice=choice, parallel_tool_calls=False,
                                            temperature=0, max_tokens=150, stream=True))
    streamed: dict[int, list[str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if delta.index not in streamed:  # the first delta of a call
                assert delta.id and delta.type == "function" and delta.function
                assert delta.function.name in SCHEMAS
                streamed[delta.index] = [delta.id, delta.function.name, ""]
            else:
                assert delta.id is None and delta.function and delta.function.name is None
            streamed[delta.index][2] += (delta.function.arguments or "") if delta.function else ""
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    assert [(n, json.loads(a)) for _, n, a in streamed.values()] == [
        (n, json.loads(a)) for _, n, a in calls]  # greedy: the same calls as whole


def test_parallel_calls_each_validate(model_server: ServerProcess) -> None:
    answer = whole(sdk(model_server), tool_choice="required", max_tokens=200)
    calls = [(t.id, t.function.name, t.function.arguments)
             for t in answer.message.tool_calls or []]
    if answer.finish_reason == "length":  # the last call may be cut: the others whole
        calls = calls[:-1]
    check_calls(calls)


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_auto_and_none_answer_text_or_calls_never_a_tag_in_content(
        model_server: ServerProcess, choice: str) -> None:
    answer = whole(sdk(model_server), tool_choice=choice)
    if choice == "none":
        assert not answer.message.tool_calls and answer.finish_reason in ("stop", "length")
    if answer.message.tool_calls:
        check_calls([(t.id, t.function.name, t.function.arguments)
                     for t in answer.message.tool_calls])
    assert "<tool_call>" not in (answer.message.content or "")


def test_a_stop_string_never_cuts_a_call(model_server: ServerProcess) -> None:
    answer = whole(sdk(model_server), tool_choice={"type": "function",
                                                   "function": {"name": "get_weather"}},
                   parallel_tool_calls=False, stop=["Paris", "unit"])
    assert answer.finish_reason == "tool_calls"
    check_calls([(t.id, t.function.name, t.function.arguments)
                 for t in answer.message.tool_calls or []])


def test_a_tool_loop_reads_the_call_and_its_result(model_server: ServerProcess) -> None:
    c = sdk(model_server)
    first = whole(c, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                  parallel_tool_calls=False)
    call = first.message.tool_calls[0]
    history: Any = [*ASK, first.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps({"temperature": 21, "sky": "sunny"})}]
    final = c.chat.completions.create(model=MODEL, messages=history, tools=TOOLS,
                                      temperature=0, max_tokens=40)
    assert final.usage is not None
    alone = c.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, temperature=0,
                                      max_tokens=1)
    assert alone.usage is not None
    assert final.usage.prompt_tokens > alone.usage.prompt_tokens + 20  # call and result read
    assert final.choices[0].finish_reason in ("stop", "length", "tool_calls")


class Lookup(BaseModel):
    city: str
    days: int


def test_the_sdks_pydantic_function_tool_parses(model_server: ServerProcess) -> None:
    c = sdk(model_server)
    answer = c.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Forecast for Oslo, 3 days."}],
        tools=[openai.pydantic_function_tool(Lookup)], tool_choice="required",
        parallel_tool_calls=False, temperature=0, max_tokens=100)
    call = answer.choices[0].message.tool_calls[0]
    assert isinstance(call.function.parsed_arguments, Lookup)


def test_langchain_bind_tools(model_server: ServerProcess) -> None:
    import langchain_openai  # the test extra: a missing one fails, never skips
    llm = langchain_openai.ChatOpenAI(base_url=model_server.url + "/v1", api_key="unused",
                                      model=MODEL, temperature=0, max_tokens=100,
                                      max_retries=0)

    def get_weather(city: str, unit: str) -> str:
        """The current weather in a city, in unit C or F."""
        return "sunny"

    from langchain_core.utils.function_calling import convert_to_openai_tool

    message = llm.bind_tools([get_weather], tool_choice="required",
                             parallel_tool_calls=False).invoke(
        "What is the weather in Rome?")
    assert message.tool_calls and message.tool_calls[0]["name"] == "get_weather"
    sent = convert_to_openai_tool(get_weather)["function"]["parameters"]  # as LangChain sent it
    jsonschema.validate(message.tool_calls[0]["args"], sent)
    assert not message.invalid_tool_calls


async def test_tool_calls_over_tokenpipe_v1(model_server: ServerProcess) -> None:
    async with Client(model_server.ws_url) as client:
        gen = await client.generate(ASK, params={
            "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
            "max_tokens": 150})
        text = await gen.collect()
        assert text == "" and gen.end is not None
        assert gen.end["finish_reason"] == "tool_calls"
        calls = gen.tool_calls
        check_calls([(c["id"], c["name"], c["arguments"]) for c in calls])
        heads = [d for d in gen.deltas if "call_id" in d]
        assert [d["index"] for d in heads] == list(range(len(calls)))
        assert [d["seq"] for d in gen.deltas] == list(range(len(gen.deltas)))
        plain = await client.generate(ASK, params={"max_tokens": 8})
        await plain.collect()
        assert all(set(d) == {"type", "id", "seq", "text"} for d in plain.deltas)


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "string"}}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"not": {}}}}}}]}, "tools"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
])
def test_bad_tools_are_a_400_naming_the_parameter(model_server: ServerProcess,
                                                  body: dict[str, Any], param: str) -> None:
    r = httpx.post(model_server.url + "/v1/chat/completions", timeout=30,
                   json={"model": MODEL, "messages": ASK, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith(param), r.text


def test_the_fake_engine_refuses_tools_rather_than_ignore_them(fake_server: ServerProcess
                                                               ) -> None:
    r = httpx.post(fake_server.url + "/v1/chat/completions", timeout=30,
                   json={"messages": ASK, "tools": TOOLS})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
