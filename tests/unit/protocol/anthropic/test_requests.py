"""The Anthropic Messages request models: what maps to the core's request, what is refused
and how the refusal is worded (Anthropic's "field.path: message")."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tokenpipe.protocol.anthropic.errors import validation_error
from tokenpipe.protocol.anthropic.requests import CountTokensRequest, MessagesRequest
from tokenpipe.types import (
    GenerationRequest,
    Message,
    OutputFormat,
    SamplingParams,
    Tool,
    ToolCall,
    ToolChoice,
)

USER: Any = [{"role": "user", "content": "hi"}]
TOOL: Any = {"name": "f", "input_schema": {"type": "object"}}
ASKED: Any = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                                "input": {}}]}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 8, "messages": USER, **fields}


def refusal(fields: dict[str, Any], model: type[Any] = MessagesRequest) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(fields)
    err = validation_error(info.value.errors())
    assert err.status == 400
    return err.message


def test_every_parameter_maps() -> None:
    req = MessagesRequest.model_validate(body(
        system="be brief", temperature=0.5, top_p=0.9, top_k=40, stop_sequences=["END", "x"],
        stream=True, metadata={"user_id": "u1"}, service_tier="auto"))
    assert req.stream is True
    assert req.to_request() == GenerationRequest(
        messages=(Message("system", "be brief"), Message("user", "hi")), model="m",
        params=SamplingParams(max_tokens=8, temperature=0.5, top_p=0.9, top_k=40,
                              stop=("END", "x")))


def test_defaults_are_anthropics() -> None:
    params = MessagesRequest.model_validate(body()).to_request().params
    assert params == SamplingParams(max_tokens=8, temperature=1.0, top_p=1.0, top_k=0,
                                    stop=())


def test_text_blocks_join_and_turns_keep_their_order() -> None:
    req = MessagesRequest.model_validate(body(
        system=[{"type": "text", "text": "one"},
                {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                               {"type": "text", "text": "b"}]},
                  {"role": "assistant", "content": "c"},
                  {"role": "user", "content": "d"},
                  {"role": "user", "content": [{"type": "text", "text": "e",
                                                "citations": None}]}]))
    assert req.to_request().messages == (
        Message("system", "one\ntwo"), Message("user", "a\nb"), Message("assistant", "c"),
        Message("user", "d"), Message("user", "e"))


def test_neutral_and_ignored_fields_pass() -> None:
    req = MessagesRequest.model_validate(body(
        tools=[], tool_choice={"type": "none"}, thinking={"type": "disabled"},
        output_config={}, cache_control={"type": "ephemeral"}, speed="standard",
        inference_geo="us", diagnostics={}, user_profile_id="p", workspace_id="w",
        mcp_servers=[], metadata=None, temperature=None))
    assert req.to_request().params.temperature == 1.0


@pytest.mark.parametrize(("fields", "message"), [
    ({"max_tokens": None}, "max_tokens: Input should be a valid integer"),
    ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    ({"temperature": 1.5}, "temperature: Input should be less than or equal to 1"),
    ({"top_k": -1}, "top_k: Input should be greater than or equal to 0"),
    ({"top_p": "high"}, "top_p: Input should be a valid number"),
    ({"stream": "yes"}, "stream: Input should be a valid boolean"),
    ({"messages": []}, "messages: List should have at least 1 item"),
    ({"messages": "hi"}, "messages: Input should be a valid list"),
    ({"messages": [{"role": "system", "content": "x"}]},
     "messages.0.role: Input should be 'user' or 'assistant'"),
    ({"messages": [{"role": "user"}]}, "messages.0.content: Field required"),
    ({"messages": [{"role": "user", "content": 5}]},
     "messages.0.content: Input should be a valid string"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "image", "source": {}}]}]},
     "messages.0.content.1.type: content blocks of type 'image' are not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     "messages.0.content.0.tool_use_id: Field required"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result",
                                                 "tool_use_id": "toolu_9"}]}]},
     "messages.0.content.0.tool_use_id: unexpected tool_use_id 'toolu_9'"),
    ({"messages": [{"role": "user", "content": "q"}, ASKED,
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                 "content": [{"type": "image"}]}]}]},
     "messages.2.content.0.content.0.type: content blocks of type 'image' are not"),
    ({"messages": [{"role": "user", "content": "q"}, ASKED,
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                 "is_error": "yes"}]}]},
     "messages.2.content.0.is_error: Input should be a valid boolean"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t1",
                                                 "name": "f", "input": {}}]}]},
     "messages.0.content.0.type: tool_use blocks are only in assistant messages"),
    ({"messages": [{"role": "user", "content": "q"},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                      "name": "f", "input": "{}"}]},
                   {"role": "user", "content": "q"}]},
     "messages.1.content.0.input: Input should be a valid dictionary"),
    ({"messages": [{"role": "user", "content": "q"},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": ".",
                                                      "signature": "", "x": 1}]},
                   {"role": "user", "content": "q"}]},
     "messages.1.content.0.x: Extra inputs are not permitted"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages.0.content.0.text: Field required"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]},
     "messages.0.content.0.x: Extra inputs are not permitted"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a",
                                                 "cache_control": [None]}]}]},
     "messages.0.content.0.cache_control: Input should be a valid dictionary"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a",
                                                 "citations": {}}]}]},
     "messages.0.content.0.citations: Input should be a valid list"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a",
                                                 "citations": [{"type": "x"}]}]}]},
     "messages.0.content.0.citations: citations are not supported"),
    ({"messages": [{"role": "user", "content": ["a"]}]},
     "messages.0.content.0: a content block is an object"),
    ({"messages": [{"role": "user", "content": "\ud800"}]},
     "messages.0.content: text with a lone UTF-16 surrogate"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A:"}],
      "thinking": {"type": "adaptive"}},
     "messages.1: assistant message prefill is not supported together with tools"),
    ({"system": [{"type": "document", "source": {}}]},
     "system.0.type: content blocks of type 'document' are not supported"),
    ({"system": 5}, "system: Input should be a valid string"),
    ({"stop_sequences": ["ok", ""]}, "stop_sequences.1: String should have at least 1"),
    ({"stop_sequences": ["s"] * 17}, "stop_sequences: List should have at most 16 items"),
    ({"tools": [{"name": "bad name", "input_schema": {}}]}, "tools.0.name: String should"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema: Field required"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     "tools.0.type: server tools (type 'web_search_20250305') are not supported"),
    ({"tools": [TOOL, TOOL]}, "tools: two tools have the same name"),
    ({"tool_choice": {"type": "any"}}, "tool_choice: tool_choice any needs tools"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool"}},
     "tool_choice.name: name is required with type tool"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "g"}},
     "tool_choice.name: tool_choice names 'g', which is not among the tools"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type: Input should be"),
    ({"thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking.budget_tokens: Input"),
    ({"thinking": {"type": "on"}}, "thinking.type: Input should be"),
    ({"output_config": {"effort": "high"}}, "output_config.effort: output_config.effort is "
                                            "not supported"),
    ({"output_config": {"format": {"type": "json_object"}}}, "output_config.format.type"),
    ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema"),
    ({"container": "c1"}, "container: containers (code execution) are not supported"),
    ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
])
def test_refusals_name_the_field(fields: dict[str, Any], message: str) -> None:
    assert refusal(body(**fields)).startswith(message)


def test_max_tokens_is_required_model_is_not() -> None:
    assert MessagesRequest.model_validate({"max_tokens": 8, "messages": USER}).to_request(
    ).model is None  # the server's model, as on the OpenAI door
    assert refusal({"model": "m", "messages": USER}) == "max_tokens: Field required"
    assert refusal([]) == "The request body must be a JSON object."  # type: ignore[arg-type]


def test_count_tokens_takes_the_prompt_only() -> None:
    req = CountTokensRequest.model_validate({"model": "m", "system": "s", "messages": USER})
    assert req.to_request() == GenerationRequest(
        messages=(Message("system", "s"), Message("user", "hi")), model="m")
    assert refusal({"model": "m", "messages": USER, "max_tokens": 5}, CountTokensRequest) == (
        "max_tokens: Extra inputs are not permitted")
    req = CountTokensRequest.model_validate({"model": "m", "messages": USER, "tools": [TOOL]})
    assert req.to_request().tools == (Tool("f", None, '{"type":"object"}'),)  # counted too


def test_tools_choices_and_thinking_map() -> None:
    weather = {"type": "object", "properties": {"city": {"type": "string"}}}
    req = MessagesRequest.model_validate(body(
        tools=[{"name": "get_weather", "description": "Weather now", "input_schema": weather,
                "cache_control": {"type": "ephemeral"}, "type": "custom", "strict": True},
               TOOL],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 2048})).to_request()
    assert req.tools == (Tool("get_weather", "Weather now",
                              '{"type":"object","properties":{"city":{"type":"string"}}}'),
                         Tool("f", None, '{"type":"object"}'))
    assert req.tool_choice == ToolChoice("function", "get_weather", parallel=False)
    assert req.split_reasoning
    for kind, mode in (("auto", "auto"), ("any", "required"), ("none", "none")):
        got = MessagesRequest.model_validate(body(tools=[TOOL], tool_choice={"type": kind}))
        assert got.to_request().tool_choice == ToolChoice(mode)  # type: ignore[arg-type]
    assert MessagesRequest.model_validate(body(tools=[TOOL])).to_request().tool_choice == (
        ToolChoice())
    for thinking, split in (({"type": "disabled"}, False), ({"type": "adaptive"}, True),
                            (None, False)):
        got = MessagesRequest.model_validate(body(thinking=thinking)).to_request()
        assert got.split_reasoning is split and got.think is split  # asked to think


def test_a_thinking_budget_below_max_tokens_applies_and_output_config_format_maps() -> None:
    def budget(max_tokens: int, **thinking: Any) -> int | None:
        got = MessagesRequest.model_validate(body(max_tokens=max_tokens,
                                                  thinking=thinking)).to_request()
        return got.reasoning_budget

    assert budget(100, type="enabled", budget_tokens=40) == 40
    assert budget(100, type="enabled", budget_tokens=100) is None  # max_tokens ends it first
    assert budget(100, type="enabled") is None
    assert budget(100, type="adaptive", budget_tokens=40) is None
    assert budget(100, type="disabled", budget_tokens=40) is None
    count = CountTokensRequest.model_validate({"messages": USER, "thinking": {
        "type": "enabled", "budget_tokens": 40}}).to_request()
    assert count.reasoning_budget is None  # nothing is generated
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {}}}
    got = MessagesRequest.model_validate(body(output_config={
        "format": {"type": "json_schema", "schema": schema}, "effort": None})).to_request()
    assert got.format == OutputFormat("json_schema", '{"type":"object","properties":'
                                                     '{"b":{"type":"string"},"a":{}}}')
    assert MessagesRequest.model_validate(body(output_config={})).to_request().format is None


def test_tool_use_and_results_become_calls_and_tool_turns_in_order() -> None:
    req = MessagesRequest.model_validate(body(tools=[TOOL], messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "plan", "signature": ""},
            {"type": "redacted_thinking", "data": "x"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_b", "name": "f", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "5 C"},
            {"type": "tool_result", "tool_use_id": "toolu_b", "is_error": True,
             "content": [{"type": "text", "text": "no city"}, {"type": "text", "text": "!"}]},
            {"type": "text", "text": "and tomorrow?"}]},
    ])).to_request()
    assert req.messages == (
        Message("user", "weather?"),
        Message("assistant", "Let me look.", (ToolCall("toolu_a", "f", '{"city": "Oslo"}'),
                                              ToolCall("toolu_b", "f", "{}"))),
        Message("tool", "5 C", tool_call_id="toolu_a"),
        Message("tool", "Error: no city\n!", tool_call_id="toolu_b"),
        Message("user", "and tomorrow?"))
