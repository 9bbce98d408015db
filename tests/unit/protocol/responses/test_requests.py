"""The Responses request model: what maps to the core's request (input items, instructions,
history, sampling, text.format through chat's ResponseFormat), what is refused and how the
refusal names the parameter (OpenAI's `input[0].content[1].type`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from tokenpipe.protocol.formats import ResponseFormat
from tokenpipe.protocol.responses.errors import request_error
from tokenpipe.protocol.responses.objects import input_items
from tokenpipe.protocol.responses.requests import ResponsesRequest
from tokenpipe.types import (
    GenerationRequest,
    Message,
    OutputFormat,
    SamplingParams,
    Tool,
    ToolCall,
    ToolChoice,
)


def parse(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})


def refusal(**fields: Any) -> tuple[str | None, str, str | None]:
    """(param, message, code) of the 400 the request gets."""
    with pytest.raises(ValidationError) as info:
        ResponsesRequest.model_validate({"model": "m", "input": "hi", **fields})
    err = request_error(info.value.errors())
    assert err.status == 400
    return err.param, err.message, err.openai_code


def test_a_string_is_one_user_message_and_sampling_maps() -> None:
    req = parse(instructions="be brief", temperature=0.5, top_p=0.9, max_output_tokens=7,
                seed=-1, metadata={"k": "v"}, user="u", store=False, truncation="disabled",
                parallel_tool_calls=False, tools=[], include=[], tool_choice="auto",
                reasoning={"effort": None}, service_tier="auto", prompt_cache_key="x",
                stream_options={"include_obfuscation": False}, text={"format": {"type": "text"}})
    assert not req.stored
    assert req.to_request() == GenerationRequest(
        messages=(Message("system", "be brief"), Message("user", "hi")), model="m",
        params=SamplingParams(max_tokens=7, temperature=0.5, top_p=0.9, seed=2**63 - 1),
        tool_choice=ToolChoice(parallel=False))


def test_defaults_are_openais() -> None:
    req = ResponsesRequest.model_validate({"input": "hi"})
    assert req.stored and not req.background and req.model is None
    assert req.to_request().params == SamplingParams(temperature=1.0, top_p=1.0)


def test_items_long_and_short_form_in_order_with_history_first() -> None:
    req = parse(input=[
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "one"}, {"type": "input_text", "text": "two"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "ok", "annotations": [], "logprobs": []}]},
        {"role": "system", "content": "more"},
        {"role": "user", "content": "three"}], instructions="first")
    history = (Message("user", "before"), Message("assistant", "answer"))
    assert req.to_request(history).messages == (
        Message("system", "first"), *history, Message("system", "rules"),
        Message("user", "one\ntwo"), Message("assistant", "ok"), Message("system", "more"),
        Message("user", "three"))
    items = input_items(req)
    assert [i["role"] for i in items] == ["developer", "user", "assistant", "system", "user"]
    assert items[2]["id"] == "msg_1" and items[2]["content"][0]["type"] == "output_text"
    assert items[1]["content"] == [{"type": "input_text", "text": "one\ntwo"}]
    assert all(i["id"].startswith("msg_") for i in items)


def test_reasoning_effort_asks_to_think_and_reasoning_items_are_dropped() -> None:
    for effort, asked in (("low", True), ("max", True), ("none", False), (None, False)):
        req = parse(reasoning={"effort": effort})
        assert req.thinks is asked and req.items is asked  # a reasoning item: items
        generated = req.to_request()
        assert generated.think is asked and generated.split_reasoning is asked
    thought = {"type": "reasoning", "id": "rs_1", "summary": [], "status": "completed",
               "encrypted_content": None,
               "content": [{"type": "reasoning_text", "text": "plan"}]}
    req = parse(input=[{"role": "user", "content": "q"}, thought,
                       {"role": "assistant", "content": "a"}, {"role": "user", "content": "r"}])
    assert req.to_request().messages == (Message("user", "q"), Message("assistant", "a"),
                                         Message("user", "r"))
    listed = input_items(req)[1]
    assert (listed["id"], listed["type"], listed["content"]) == (
        "rs_1", "reasoning", thought["content"])


@pytest.mark.parametrize("fmt", [
    {"type": "json_object"},
    {"type": "json_schema", "name": "person", "strict": True,
     "schema": {"type": "object", "properties": {"b": {"type": "string"}, "a": {}}}},
    {"type": "json_schema", "name": "any"},
])
def test_text_format_maps_as_chat_response_format_does(fmt: dict[str, Any]) -> None:
    chat: dict[str, Any] = {"type": fmt["type"]}
    if fmt["type"] == "json_schema":
        chat["json_schema"] = {k: v for k, v in fmt.items() if k != "type"}
    expected = ResponseFormat.model_validate(chat).to_format()
    assert isinstance(expected, OutputFormat)
    assert parse(text={"format": fmt}).to_request().format == expected


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "Input should be"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
     "input[0].content[0]", "'input_image' are not supported yet"),
    ({"input": [{"type": "item_reference", "id": "x"}]},
     "input[0]", "'item_reference' are not supported"),
    ({"input": [{"type": "reasoning", "summary": [], "signature": "x"}]},
     "input[0].signature", "Unrecognized"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input", "only reasoning items"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]},
     "input[0].arguments", "Missing required parameter"),
    ({"input": [{"type": "function_call_output", "output": "x"}]},
     "input[0].call_id", "Missing required parameter"),
    ({"input": []}, "input", "at least 1"),
    ({"input": "\ud800"}, "input", "surrogate"),
    ({"tools": [{"type": "web_search"}]}, "tools[0]", "'web_search' are not supported"),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]},
     "tools", "same name"),
    ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name", "match"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": [{"type": "function", "name": "f"}],
      "tool_choice": {"type": "function", "name": "g"}}, "tool_choice", "not among"),
    ({"max_tool_calls": 2}, "max_tool_calls", "parallel_tool_calls"),
    ({"include": ["reasoning.encrypted_content"]}, "include", "is produced here"),
    ({"reasoning": {"effort": "lots"}}, "reasoning.effort", "Input should be"),
    ({"reasoning": {"effort": "low", "summary": "auto"}}, "reasoning.summary",
     "no reasoning summary"),
    ({"truncation": "auto"}, "truncation", "disabled"),
    ({"background": True, "store": False}, "background", "need store"),
    ({"temperature": 3}, "temperature", "less than or equal to 2"),
    ({"max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
    ({"text": {"format": {"type": "json_schema"}}}, "text.format.name", "name is required"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": "no"}}},
     "text.format.schema", "json schema is an object"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "Input should be"),
    ({"stream": "yes"}, "stream", "valid boolean"),
    ({"frequency_penalty": 1}, "frequency_penalty", "Unrecognized request argument"),
    ({"conversation": "conv_1"}, "conversation", "previous_response_id"),
])
def test_refusals_name_the_parameter(fields: dict[str, Any], param: str, words: str) -> None:
    got_param, message, _ = refusal(**fields)
    assert got_param == param
    assert words in message


def test_missing_input_is_missing_required_parameter() -> None:
    with pytest.raises(ValidationError) as info:
        ResponsesRequest.model_validate({"model": "m"})
    err = request_error(info.value.errors())
    assert (err.param, err.openai_code) == ("input", "missing_required_parameter")


def test_function_tools_choice_and_call_items_map_to_the_core() -> None:
    params = {"type": "object", "properties": {"city": {"type": "string"}}}
    req = parse(tools=[{"type": "function", "name": "get_weather", "description": "d",
                        "parameters": params, "strict": True},
                       {"type": "function", "name": "noop"}],
                tool_choice={"type": "function", "name": "get_weather"},
                parallel_tool_calls=False, input=[
        {"role": "user", "content": "weather?"},
        {"type": "message", "role": "assistant", "content": "Let me look."},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather",
         "arguments": '{"city": "Paris"}', "status": "completed"},
        {"type": "function_call", "call_id": "call_b", "name": "noop", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": '{"t": 21}'},
        {"type": "function_call_output", "call_id": "call_b",
         "output": [{"type": "input_text", "text": "done"}]},
        {"type": "function_call", "call_id": "call_c", "name": "noop", "arguments": "{}"}])
    core = req.to_request()
    assert core.tools == (Tool("get_weather", "d", json.dumps(params, separators=(",", ":"))),
                          Tool("noop", None, '{"type":"object","properties":{}}'))
    assert core.tool_choice == ToolChoice("function", "get_weather", parallel=False)
    assert core.messages == (
        Message("user", "weather?"),
        Message("assistant", "Let me look.", (
            ToolCall("call_a", "get_weather", '{"city": "Paris"}'),
            ToolCall("call_b", "noop", "{}"))),
        Message("tool", '{"t": 21}', tool_call_id="call_a"),
        Message("tool", "done", tool_call_id="call_b"),
        Message("assistant", "", (ToolCall("call_c", "noop", "{}"),)))
    items = input_items(req)
    assert [i["type"] for i in items] == ["message", "message", "function_call",
                                          "function_call", "function_call_output",
                                          "function_call_output", "function_call"]
    assert items[2]["id"] == "fc_1" and items[3]["id"].startswith("fc_")
    assert items[5]["output"] == "done"
    assert parse(tools=[{"type": "function", "name": "f"}]).to_request().tool_choice == (
        ToolChoice())
