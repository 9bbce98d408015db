"""The schemas real clients send (tests/fixtures/client_schemas, captured from pydantic,
LangChain's bind_tools, the `ollama` package and Anthropic's docs: none says
`additionalProperties`), each through its official client on the real bundled model, whole
and streamed, greedy and sampled (issue 30, item 1): every answer that ends `stop` (or as a
call) parses, validates against the schema as sent, and holds no key the schema does not
declare, because an object with `properties` is read as closed (constrain/schemas.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import ollama
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

MODEL = "SmolLM2-135M-Instruct"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "client_schemas"
RUNS = [{"temperature": 0}, {"temperature": 0.8, "seed": 1}, {"temperature": 0.8, "seed": 2}]
WEATHER: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
CANADA: Any = [{"role": "user", "content": "Tell me about Canada in JSON."}]


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def openai_tool(f: dict[str, Any]) -> Any:
    return {"type": "function", "function": {"name": f["name"], "description": f["description"],
                                             "parameters": f["schema"]}}


def check(value: Any, schema: dict[str, Any]) -> None:
    """Parses (when text), validates against the schema as sent, declares every key."""
    value = json.loads(value) if isinstance(value, str) else value
    jsonschema.validate(value, schema)
    assert not _undeclared(value, schema, schema), value


def _undeclared(value: Any, schema: Any, root: Any) -> bool:
    if isinstance(schema, dict) and "$ref" in schema:
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        return _undeclared(value, target, root)
    if isinstance(value, dict) and isinstance(schema, dict):
        props = schema.get("properties", {})
        return any(k not in props or _undeclared(v, props[k], root) for k, v in value.items())
    if isinstance(value, list) and isinstance(schema, dict) and "items" in schema:
        return any(_undeclared(v, schema["items"], root) for v in value)
    return False


def sdk(server: ServerProcess) -> openai.OpenAI:
    c = closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                        max_retries=0,
                                        timeout=300))
    return c


@pytest.mark.parametrize("name", ["langchain_get_weather", "ollama_get_weather",
                                  "anthropic_docs_get_weather"])
def test_openai_tools_with_the_schemas_clients_send(model_server: ServerProcess,
                                                    name: str) -> None:
    f = fixture(name)
    c = sdk(model_server)
    clean = 0
    for run in RUNS:
        args: Any = {"model": MODEL, "messages": WEATHER, "tools": [openai_tool(f)],
                     "tool_choice": "required", "max_tokens": 150, **run}
        choice = c.chat.completions.create(**args).choices[0]
        if choice.finish_reason == "tool_calls":
            for call in choice.message.tool_calls or []:
                check(call.function.arguments, f["schema"])  # type: ignore[union-attr]
            clean += 1
        streamed: dict[int, str] = {}
        finish = None
        for chunk in c.chat.completions.create(**args, stream=True):
            for ch in chunk.choices:
                for d in ch.delta.tool_calls or []:
                    streamed[d.index] = streamed.get(d.index, "") + (
                        d.function.arguments or "" if d.function else "")
                finish = ch.finish_reason or finish
        if finish == "tool_calls":
            for arguments in streamed.values():
                check(arguments, f["schema"])
    assert clean, "no run ended as a call"


@pytest.mark.parametrize("name", ["pydantic_country", "pydantic_person"])
def test_openai_response_format_with_pydantic_schemas(model_server: ServerProcess,
                                                      name: str) -> None:
    f = fixture(name)
    c = sdk(model_server)
    stops = 0
    for run in RUNS:
        args: Any = {"model": MODEL, "messages": CANADA, "max_tokens": 200, **run,
                     "response_format": {"type": "json_schema", "json_schema": {
                         "name": f["name"], "schema": f["schema"]}}}
        choice = c.chat.completions.create(**args).choices[0]
        if choice.finish_reason == "stop":
            check(choice.message.content, f["schema"])
            stops += 1
        pieces, finish = [], None
        for chunk in c.chat.completions.create(**args, stream=True):
            for ch in chunk.choices:
                pieces.append(ch.delta.content or "")
                finish = ch.finish_reason or finish
        if finish == "stop":
            check("".join(pieces), f["schema"])
    assert stops, "no answer ended stop"


def test_anthropic_tools_and_output_config_as_the_docs_write_them(
        model_server: ServerProcess) -> None:
    tool = fixture("anthropic_docs_get_weather")
    country = fixture("pydantic_country")
    c = closed_after_test(anthropic.Anthropic(base_url=model_server.url, api_key="unused",
                                              max_retries=0,
                                              timeout=300))
    uses = stops = 0
    with c:
        for run in ({k: v for k, v in r.items() if k != "seed"} for r in RUNS):  # no seeds
            args: Any = {"model": MODEL, "max_tokens": 150, "messages": WEATHER,
                         "tools": [{"name": tool["name"], "description": tool["description"],
                                    "input_schema": tool["schema"]}],
                         "tool_choice": {"type": "any"}, "extra_body": run}
            m = c.messages.create(**args)
            if m.stop_reason == "tool_use":
                for block in m.content:
                    if block.type == "tool_use":
                        check(block.input, tool["schema"])
                uses += 1
            with c.messages.stream(**args) as stream:
                final = stream.get_final_message()
            if final.stop_reason == "tool_use":
                for block in final.content:
                    if block.type == "tool_use":
                        check(block.input, tool["schema"])
            fmt: Any = {"model": MODEL, "max_tokens": 200, "messages": CANADA,
                        "output_config": {"format": {"type": "json_schema",
                                                     "schema": country["schema"]}},
                        "extra_body": run}
            m = c.messages.create(**fmt)
            if m.stop_reason == "end_turn":
                check(m.content[0].text, country["schema"])  # type: ignore[union-attr]
                stops += 1
            with c.messages.stream(**fmt) as stream:
                text = "".join(stream.text_stream)
                final = stream.get_final_message()
            if final.stop_reason == "end_turn":
                check(text, country["schema"])
    assert uses and stops


def test_ollama_format_and_function_tools_as_the_package_sends_them(
        model_server: ServerProcess) -> None:
    """Ollama's documented pattern (format=Model.model_json_schema()) and a Python function
    as a tool: the package strips additionalProperties, so its users cannot close it."""
    country = fixture("pydantic_country")
    tool = fixture("ollama_get_weather")
    c = ollama.Client(host=model_server.url, timeout=300)
    closed_after_test(c._client)
    stops = 0
    for run in RUNS:
        options: Any = {"num_predict": 200, **run}
        r = c.chat(model=MODEL, format=country["schema"], options=options, messages=CANADA)
        if r.done_reason == "stop":
            check(r.message.content, country["schema"])
            stops += 1
        parts = list(c.chat(model=MODEL, format=country["schema"], options=options,
                            messages=CANADA, stream=True))
        if parts[-1].done_reason == "stop":
            check("".join(p.message.content or "" for p in parts), country["schema"])
        tools: Any = [openai_tool(tool)]
        for r in [c.chat(model=MODEL, tools=tools, options=options, messages=WEATHER),
                  *c.chat(model=MODEL, tools=tools, options=options, messages=WEATHER,
                          stream=True)]:
            for call in r.message.tool_calls or []:
                check(dict(call.function.arguments), tool["schema"])
    assert stops, "no answer ended stop"


async def test_tokenpipe_v1_and_responses_read_the_schema_alike(
        model_server: ServerProcess) -> None:
    country = fixture("pydantic_country")
    tool = fixture("langchain_get_weather")
    fmt = {"type": "json_schema", "json_schema": {"name": "Country",
                                                  "schema": country["schema"]}}
    async with Client(model_server.ws_url) as client:
        gen = await client.generate(CANADA, params={"response_format": fmt,
                                                    "max_tokens": 200, "temperature": 0})
        text = await gen.collect()
    assert gen.end is not None
    if gen.end["finish_reason"] == "stop":
        check(text, country["schema"])
    r = sdk(model_server).responses.create(
        model=MODEL, input="What is the weather in Paris?", temperature=0,
        max_output_tokens=150, tool_choice="required", store=False,
        tools=[{"type": "function", "name": tool["name"], "description": tool["description"],
                "parameters": tool["schema"], "strict": False}])
    calls = [item for item in r.output if item.type == "function_call"]
    assert r.status == "completed" and calls
    for call in calls:
        check(call.arguments, tool["schema"])  # type: ignore[union-attr]
