"""Tool calls through the openai engine on a real upstream: a tokenpipe server on the bundled
SmolLM2 (llama.cpp, which generates calls under a grammar) behind a second tokenpipe server
with `--engine openai`, through the official openai SDK. Greedy, so the proxy's calls equal
the upstream's own, streamed and whole, with tool_choice required, named and auto; and a
history of a call and its result reaches the upstream as it was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test, running
from tests.e2e.test_tool_calls import ASK, MODEL, SCHEMAS, TOOLS

pytestmark = [pytest.mark.e2e, pytest.mark.model]


@pytest.fixture(scope="module")
def proxy(model_server: ServerProcess) -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "openai", "--upstream", model_server.url,
                                "--parallel", "2"))) as server:
        yield server


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                           max_retries=0,
                                           timeout=120))


def calls_of(choice: Any) -> list[tuple[str, Any]]:
    return [(t.function.name, json.loads(t.function.arguments))
            for t in choice.message.tool_calls or []]


def streamed(c: openai.OpenAI, **args: Any) -> tuple[list[tuple[str, Any]], str | None, str]:
    calls: dict[int, list[str]] = {}
    finish, content = None, ""
    for chunk in c.chat.completions.create(stream=True, **args):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for d in choice.delta.tool_calls or []:
            if d.index not in calls:  # a call's first delta: index, id, type, name
                assert d.index == len(calls) and d.id and d.id.startswith("call_")
                assert d.type == "function" and d.function and d.function.name in SCHEMAS
                calls[d.index] = [d.function.name, ""]
            else:
                assert d.id is None and (d.function is None or d.function.name is None)
            calls[d.index][1] += (d.function.arguments or "") if d.function else ""
        if choice.finish_reason:
            finish = choice.finish_reason
    return [(n, json.loads(a)) for n, a in calls.values()], finish, content


@pytest.mark.parametrize("choice", [
    "required", {"type": "function", "function": {"name": "search"}}, "auto"],
    ids=["required", "named", "auto"])
def test_the_proxys_calls_are_the_upstreams(model_server: ServerProcess,
                                            proxy: ServerProcess, choice: Any) -> None:
    args: Any = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": choice,
                 "parallel_tool_calls": False, "temperature": 0, "max_tokens": 120}
    direct = sdk(model_server).chat.completions.create(**args).choices[0]
    via = sdk(proxy).chat.completions.create(**args).choices[0]
    assert via.finish_reason == direct.finish_reason
    assert calls_of(via) == calls_of(direct)
    assert (via.message.content or None) == (direct.message.content or None)
    if choice != "auto":
        assert via.finish_reason == "tool_calls" and len(calls_of(via)) == 1
    if isinstance(choice, dict):
        assert calls_of(via)[0][0] == "search"
    for name, arguments in calls_of(via):
        jsonschema.validate(arguments, SCHEMAS[name])
    calls, finish, content = streamed(sdk(proxy), **args)
    assert (calls, finish) == (calls_of(direct), direct.finish_reason)
    assert content == (direct.message.content or "")


def test_a_call_and_its_result_reach_the_upstream(model_server: ServerProcess,
                                                 proxy: ServerProcess) -> None:
    c = sdk(proxy)
    first = c.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False).choices[0]
    call = first.message.tool_calls[0]
    history: Any = [*ASK, first.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps({"temperature": 21, "sky": "sunny"})}]
    args: Any = {"model": MODEL, "messages": history, "tools": TOOLS, "temperature": 0,
                 "max_tokens": 30, "tool_choice": "none"}
    via = c.chat.completions.create(**args)
    direct = sdk(model_server).chat.completions.create(**args)
    assert via.usage is not None and direct.usage is not None
    # The same prompt upstream as sent directly: the call and its result were forwarded.
    assert via.usage.prompt_tokens == direct.usage.prompt_tokens
    assert via.choices[0].message.content == direct.choices[0].message.content
    assert not via.choices[0].message.tool_calls
