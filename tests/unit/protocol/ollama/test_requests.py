"""Ollama request bodies and their refusals, name:tag resolution, and the error wording
(protocol/ollama: requests.py, names.py, errors.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tokenpipe.errors import (
    ContextOverflow,
    EngineError,
    Overloaded,
    UnknownModel,
)
from tokenpipe.protocol.ollama.errors import error_body, status_of, validation_error
from tokenpipe.protocol.ollama.names import listed, matches, resolve
from tokenpipe.protocol.ollama.requests import (
    ChatRequest,
    GenerateRequest,
    Options,
    ShowRequest,
)
from tokenpipe.types import Message, OutputFormat, SamplingParams, Tool, ToolCall

USER = [{"role": "user", "content": "hi"}]
TOOL: Any = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def chat(**fields: Any) -> ChatRequest:
    return ChatRequest.model_validate({"model": "m", "messages": USER, **fields})


def refusal(model: type[Any], body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    err = validation_error(info.value.errors())
    assert err.status == 400
    return err.message


# ---- what maps -----------------------------------------------------------------------------


def test_chat_maps_messages_and_ollamas_default_sampling() -> None:
    request = chat(messages=[{"role": "system", "content": "be brief"}, *USER]).to_request("S")
    assert request.model == "S" and request.prompt is None
    assert request.messages == (Message("system", "be brief"), Message("user", "hi"))
    assert request.params == SamplingParams(temperature=0.8, top_k=40, top_p=0.9)


def test_every_honoured_option_maps_with_ollamas_name() -> None:
    options = {"temperature": 0, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "num_predict": 12,
               "stop": ["\n", "END"], "seed": 42, "repeat_penalty": 1.2,
               "presence_penalty": 0.5, "frequency_penalty": -0.5}
    assert chat(options=options).to_request("S").params == SamplingParams(
        max_tokens=12, temperature=0.0, top_p=0.5, top_k=7, min_p=0.1,
        repetition_penalty=1.2, presence_penalty=0.5, frequency_penalty=-0.5, seed=42,
        stop=("\n", "END"))


@pytest.mark.parametrize("n", [-2, -1, 0])
def test_num_predict_without_a_limit_is_the_servers_default(n: int) -> None:
    assert Options(num_predict=n).sampling().max_tokens is None


def test_go_style_numbers_and_ollamas_special_values() -> None:
    params = Options.model_validate({"top_k": 40.0, "num_predict": 8.0, "seed": -1,
                                     "temperature": 1, "stop": "END"}).sampling()
    assert (params.top_k, params.max_tokens, params.seed) == (40, 8, None)  # -1: random
    assert params.temperature == 1.0 and params.stop == ("END",)
    assert Options(top_k=-1).sampling().top_k == 0  # off, as llama.cpp reads it


def test_server_settings_and_moot_options_are_accepted_and_change_nothing() -> None:
    ignored = {"num_ctx": 4096, "num_thread": 4, "num_gpu": 99, "num_batch": 512,
               "main_gpu": 0, "num_keep": 5, "use_mmap": True, "use_mlock": False,
               "numa": False, "low_vram": False, "f16_kv": True, "vocab_only": False,
               "logits_all": False, "embedding_only": False, "repeat_last_n": 64,
               "penalize_newline": True, "mirostat": 0, "mirostat_tau": 5.0,
               "mirostat_eta": 0.1, "typical_p": 1.0, "tfs_z": 1}
    assert Options.model_validate(ignored).sampling() == Options().sampling()


def test_generate_wraps_the_prompt_in_a_user_turn_unless_raw() -> None:
    body = {"model": "m", "prompt": "why?", "system": "be brief"}
    request = GenerateRequest.model_validate(body).to_request("S")
    assert request.messages == (Message("system", "be brief"), Message("user", "why?"))
    raw = GenerateRequest.model_validate({"model": "m", "prompt": "abc", "raw": True})
    assert raw.to_request("S").prompt == "abc" and raw.to_request("S").messages is None


def test_load_calls_stream_default_and_neutral_values() -> None:
    assert ChatRequest.model_validate({"model": "m"}).loads_only
    assert ChatRequest.model_validate({"model": "m", "messages": []}).loads_only
    assert GenerateRequest.model_validate({"model": "m", "prompt": ""}).loads_only
    assert not chat().loads_only and chat().streamed and not chat(stream=False).streamed
    # what the official client sends when nothing is asked for, and other neutral values
    neutral = chat(tools=[], think=False, format="", logprobs=False, top_logprobs=0,
                   keep_alive="5m", truncate=True, shift=False)
    assert neutral.to_request("S") == chat().to_request("S")
    assert chat(keep_alive=-1).keep_alive_s == -1
    assert chat(keep_alive="1h30m").keep_alive_s == 5400 and chat().keep_alive_s is None
    message = {"role": "assistant", "content": None, "images": [], "tool_calls": [],
               "thinking": "hmm"}
    assert chat(messages=[*USER, message]).to_request("S").messages[-1] == Message(
        "assistant", "")


def test_format_tools_think_and_the_tool_history_map() -> None:
    assert chat(format="json").to_request("S").format == OutputFormat("json_object")
    schema = {"type": "object", "properties": {"b": {}, "a": {"type": "integer"}}}
    assert chat(format=schema).to_request("S").format == OutputFormat(
        "json_schema", '{"type":"object","properties":{"b":{},"a":{"type":"integer"}}}')
    gen = GenerateRequest.model_validate({"model": "m", "prompt": "x", "format": "json",
                                          "think": True, "raw": True}).to_request("S")
    assert gen.format == OutputFormat("json_object") and gen.split_reasoning
    assert gen.think  # asked: a model that cannot think refuses it (Engine.prepare)
    for think, split in ((True, True), ("high", True), (False, False), (None, False)):
        asked = chat(think=think).to_request("S")
        assert asked.split_reasoning is split and asked.think is split
    req = chat(tools=[TOOL, {"type": "function", "function": {
        "name": "g", "description": "G", "parameters": {"type": "object", "required": ["x"],
                                                        "properties": {"x": {"type": "string"}}}}}],
        messages=[*USER,
                  {"role": "assistant", "content": "", "thinking": "hmm", "tool_calls": [
                      {"function": {"name": "g", "arguments": {"x": "1"}}},
                      {"function": {"name": "f", "arguments": {}}}]},
                  {"role": "tool", "content": "F", "tool_name": "f"},
                  {"role": "tool", "content": "G"},
                  {"role": "tool", "content": "extra"},
                  {"role": "user", "content": "so?"}]).to_request("S")
    assert req.tools == (Tool("f", None, '{"type":"object"}'), Tool(
        "g", "G", '{"type":"object","required":["x"],"properties":{"x":{"type":"string"}}}'))
    assert req.messages == (  # results pair by tool_name, then in order; ids from places
        Message("user", "hi"),
        Message("assistant", "", (ToolCall("call_1_0", "g", '{"x":"1"}'),
                                  ToolCall("call_1_1", "f", "{}"))),
        Message("tool", "F", tool_call_id="call_1_1"),
        Message("tool", "G", tool_call_id="call_1_0"),
        Message("tool", "extra", tool_call_id="call_4"),
        Message("user", "so?"))


def test_show_takes_model_or_name() -> None:
    assert ShowRequest.model_validate({"model": "a"}).requested == "a"
    assert ShowRequest.model_validate({"name": "b"}).requested == "b"
    assert ShowRequest.model_validate({}).requested is None


# ---- what is refused, and how it is worded ----------------------------------------------------


@pytest.mark.parametrize(("body", "words"), [
    ({"messages": USER}, "model is required"),
    ({"model": "", "messages": USER}, "model is required"),
    ({"model": "m", "messages": USER, "bogus": 1}, "unknown field 'bogus'"),
    ({"model": "m", "messages": USER, "options": {"temprature": 1}},
     "unknown option 'temprature'"),
    ({"model": "m", "messages": USER, "stream": "yes"}, "invalid type for 'stream'"),
    ({"model": "m", "messages": USER, "options": {"temperature": 3}},
     "invalid 'options.temperature': input should be less than or equal to 2 (got 3)"),
    ({"model": "m", "messages": USER, "options": {"top_k": 4.5}}, "'options.top_k'"),
    ({"model": "m", "messages": USER, "options": {"num_predict": -3}}, "options.num_predict"),
    ({"model": "m", "messages": USER, "options": {"seed": True}}, "'options.seed'"),
    ({"model": "m", "messages": USER, "options": {"stop": [""]}}, "options.stop[0]"),
    ({"model": "m", "messages": USER, "options": {"stop": ["s"] * 17}}, "options.stop"),
    ({"model": "m", "messages": USER, "options": {"mirostat": 2}}, "mirostat sampling is "
                                                                   "not supported"),
    ({"model": "m", "messages": USER, "options": {"typical_p": 0.5}}, "typical_p is not"),
    ({"model": "m", "messages": [{"role": "bot", "content": "x"}]},
     "invalid value for 'messages[0].role'"),
    ({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": [
        {"function": {"name": "f", "arguments": {}}}]}]}, "only assistant messages have"),
    ({"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": "{}"}}]}, *USER]},
     "'messages[0].tool_calls[0].function.arguments'"),
    ({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]},
     "images are not supported"),
    ({"model": "m", "messages": [{"role": "user", "content": "\ud800"}]}, "lone UTF-16"),
    ({"model": "m", "messages": [{"role": "user"}, 3]}, "'messages[1]'"),
    ({"model": "m", "messages": USER, "tools": [{"type": "function"}]},
     "tools[0].function is required"),
    ({"model": "m", "messages": USER, "tools": [TOOL, TOOL]}, "two tools have the same name"),
    ({"model": "m", "messages": USER, "format": "yaml"}, 'format must be "json" or a JSON '
                                                        "Schema object"),
    ({"model": "m", "messages": USER, "format": ["json"]}, 'format must be "json"'),
    ({"model": "m", "messages": USER, "think": "max"}, 'think must be true, false, "high"'),
    ({"model": "m", "messages": USER, "logprobs": True}, "logprobs are not supported"),
    ({"model": "m", "messages": USER, "keep_alive": [1]}, "'keep_alive'"),
])
def test_chat_refusals_say_what_is_wrong(body: dict[str, Any], words: str) -> None:
    assert words in refusal(ChatRequest, body)


@pytest.mark.parametrize(("body", "words"), [
    ({"prompt": "x", "raw": True, "system": "s"}, "raw mode does not support template, "
                                                  "system, or context"),
    ({"prompt": "x", "suffix": "}"}, "suffix (fill-in-the-middle, insert) is not supported"),
    ({"prompt": "x", "template": "{{ .Prompt }}"}, "template is not supported"),
    ({"prompt": "x", "context": [1, 2, 3]}, "context is not supported: send the "
                                            "conversation to /api/chat"),
    ({"prompt": "x", "images": ["aGk="]}, "images are not supported"),
    ({"prompt": 3}, "invalid type for 'prompt'"),
])
def test_generate_refusals_say_what_is_wrong(body: dict[str, Any], words: str) -> None:
    assert words in refusal(GenerateRequest, {"model": "m", **body})


def test_a_body_that_is_not_an_object() -> None:
    assert refusal(ChatRequest, [1]) == "the request body must be a JSON object"  # type: ignore[arg-type]


def test_tokenpipe_errors_in_ollamas_words_and_statuses() -> None:
    unknown = UnknownModel("unknown model 'x'", param="model")
    assert (status_of(unknown), error_body(unknown, "x:latest")) == (
        404, {"error": "model 'x:latest' not found"})
    full = Overloaded("the queue is full", retry_after_ms=1000)
    assert status_of(full) == 503  # Ollama's "server busy", not 429
    assert status_of(EngineError("boom")) == 500 and error_body(EngineError("boom")) == {
        "error": "boom"}
    over = ContextOverflow("max_tokens (9000) exceeds the context of 8192 tokens: "
                           "limits.max_tokens is 8191", param="max_tokens")
    assert error_body(over) == {"error": "num_predict (9000) exceeds the context of 8192 "
                                         "tokens: at most 8191"}
    prompt = ContextOverflow("the prompt has 9000 tokens", param="messages")
    assert (status_of(prompt), error_body(prompt)) == (400, {"error": "the prompt has 9000 "
                                                                      "tokens"})


# ---- names ---------------------------------------------------------------------------------


SERVED = ["SmolLM2-135M-Instruct", "fake"]


@pytest.mark.parametrize(("requested", "served"), [
    ("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct"),
    ("SmolLM2-135M-Instruct:latest", "SmolLM2-135M-Instruct"),
    ("smollm2-135m-instruct", "SmolLM2-135M-Instruct"),
    ("smollm2", "SmolLM2-135M-Instruct"),
    ("smollm2:latest", "SmolLM2-135M-Instruct"),
    ("SMOLLM2:135M", "SmolLM2-135M-Instruct"),
    ("smollm2-135m", "SmolLM2-135M-Instruct"),
    ("fake:latest", "fake"),
    ("smollm2:360m", None),  # a size this server does not serve
    ("smol", None),  # not a whole word
    ("llama3.2", None),
    (":latest", None),
])
def test_ollama_names_map_to_the_served_model(requested: str, served: str | None) -> None:
    assert resolve(requested, SERVED) == served


def test_an_ambiguous_name_maps_to_none_and_an_exact_name_wins() -> None:
    served = ["smollm2-135m", "smollm2-360m"]
    assert matches("smollm2", served) == served and resolve("smollm2", served) is None
    assert resolve("smollm2:360m", served) == "smollm2-360m"
    assert resolve("smollm2-135m", served) == "smollm2-135m"
    assert resolve("m:v1", ["m:v1", "m"]) == "m:v1"
    assert listed("m") == "m:latest" and listed("m:v1") == "m:v1"
