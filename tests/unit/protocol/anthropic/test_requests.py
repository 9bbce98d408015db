"""The Anthropic Messages request models: what maps to the core's request, what is refused
and how the refusal is worded (Anthropic's "field.path: message")."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tokenpipe.protocol.anthropic.errors import validation_error
from tokenpipe.protocol.anthropic.requests import CountTokensRequest, MessagesRequest
from tokenpipe.types import GenerationRequest, Message, SamplingParams

USER: Any = [{"role": "user", "content": "hi"}]


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
     "messages.0.content.1.type: content blocks of type 'image' are not supported yet"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     "messages.0.content.0.type: content blocks of type 'tool_result' are not supported"),
    ({"messages": [{"role": "user", "content": "q"},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": "."}]},
                   {"role": "user", "content": "q"}]},
     "messages.1.content.0.type: content blocks of type 'thinking' are not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages.0.content.0.text: Input should be a valid string"),
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
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A:"}]},
     "messages.1: This server does not support assistant message prefill"),
    ({"system": [{"type": "document", "source": {}}]},
     "system.0.type: content blocks of type 'document' are not supported yet"),
    ({"system": 5}, "system: Input should be a valid string"),
    ({"stop_sequences": ["ok", ""]}, "stop_sequences.1: String should have at least 1"),
    ({"stop_sequences": ["s"] * 17}, "stop_sequences: List should have at most 16 items"),
    ({"tools": [{"name": "f", "input_schema": {}}]}, "tools: tool use is not supported yet"),
    ({"tool_choice": {"type": "auto"}}, "tool_choice: tool use is not supported yet"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}},
     "thinking: extended thinking is not supported"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {}}}},
     "output_config: output_config (structured output formats, effort) is not supported"),
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
    assert refusal({"model": "m", "messages": USER, "tools": [{"name": "f"}]},
                   CountTokensRequest) == "tools: tool use is not supported yet"
