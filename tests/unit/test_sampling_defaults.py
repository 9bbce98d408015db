"""A model table's sampling defaults: each door names the fields its client gave, with_defaults
fills in the rest from the table, once, in the Scheduler; a table's values are range-checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenpipe.config import Settings
from tokenpipe.config_file import ConfigError
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.protocol.anthropic.requests import MessagesRequest
from tokenpipe.protocol.ollama.requests import ChatRequest, GenerateRequest
from tokenpipe.protocol.openai.completions import CompletionRequest
from tokenpipe.protocol.openai.requests import ChatCompletionRequest
from tokenpipe.protocol.responses.requests import ResponsesRequest
from tokenpipe.protocol.ws import parse_client_frame
from tokenpipe.sampling_defaults import with_defaults
from tokenpipe.scheduler import Scheduler
from tokenpipe.types import GenerationRequest, SamplingParams

TABLE: dict[str, Any] = {
    "temperature": 0.25, "top_p": 0.5, "top_k": 7, "min_p": 0.1,
    "repetition_penalty": 1.2, "presence_penalty": 0.3, "frequency_penalty": 0.4,
    "seed": 99, "stop": ("END",), "max_tokens": 12,
}
MERGED = {k: v for k, v in TABLE.items() if k != "max_tokens"}


def values(params: SamplingParams) -> dict[str, Any]:
    return {k: getattr(params, k) for k in MERGED}


def test_a_field_the_client_left_out_takes_the_tables_value() -> None:
    params = with_defaults(SamplingParams(temperature=1.0, max_tokens=None), TABLE)
    assert values(params) == MERGED
    assert params.max_tokens is None  # the Scheduler's default_max_tokens is the table's


def test_a_field_the_client_gave_keeps_its_value_even_the_doors_default() -> None:
    mine = SamplingParams(temperature=1.0, stop=(), seed=None,
                          given=frozenset({"temperature", "stop", "seed"}))
    params = with_defaults(mine, TABLE)
    assert (params.temperature, params.stop, params.seed) == (1.0, (), None)
    assert params.top_k == 7 and params.min_p == 0.1


def test_no_table_no_change() -> None:
    params = SamplingParams(temperature=0.7)
    assert with_defaults(params, {}) is params
    assert with_defaults(params, {"max_tokens": 5}) is params


def test_a_table_seed_is_taken_as_the_openai_door_takes_one() -> None:
    assert with_defaults(SamplingParams(), {"seed": 2**63 + 5}).seed == 5


OPENAI_ALL = {"temperature": 0.9, "top_p": 0.8, "top_k": 3, "min_p": 0.05,
              "repetition_penalty": 1.1, "presence_penalty": 0.1, "frequency_penalty": 0.2,
              "seed": 4, "stop": ["x"]}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _given(params: SamplingParams) -> set[str]:
    return set(params.given)


def test_the_openai_doors_name_what_was_given_and_null_is_not_a_value() -> None:
    chat = ChatCompletionRequest.model_validate_json(json.dumps({**CHAT, **OPENAI_ALL}))
    assert _given(chat.to_request().params) == set(OPENAI_ALL)
    bare = ChatCompletionRequest.model_validate_json(json.dumps(CHAT))
    assert _given(bare.to_request().params) == set()
    nulls = ChatCompletionRequest.model_validate_json(json.dumps(
        {**CHAT, "temperature": None, "stop": None, "top_k": 0}))
    assert _given(nulls.to_request().params) == {"top_k"}
    completion = CompletionRequest.model_validate_json(json.dumps(
        {"prompt": "a", "temperature": 0, "stop": "z"}))
    assert _given(completion.to_request().params) == {"temperature", "stop"}


def test_tokenpipe_v1_names_what_was_given() -> None:
    frame = parse_client_frame(json.dumps({
        "type": "generate", "id": "a", "messages": CHAT["messages"],
        "params": {"temperature": 0.0, "seed": None, "stop": [], "max_tokens": 3}}))
    assert _given(frame.to_request().params) == {"temperature", "stop"}  # type: ignore[union-attr]


def test_ollama_names_its_options_in_the_cores_names() -> None:
    chat = ChatRequest.model_validate_json(json.dumps({
        "model": "m", "messages": CHAT["messages"],
        "options": {"repeat_penalty": 1.1, "seed": -1, "num_predict": 5, "top_k": 2}}))
    assert _given(chat.to_request("m").params) == {"repetition_penalty", "seed", "top_k"}
    generate = GenerateRequest.model_validate_json(json.dumps({"model": "m", "prompt": "a"}))
    assert _given(generate.to_request("m").params) == set()


def test_anthropic_and_responses_name_what_was_given() -> None:
    anthropic = MessagesRequest.model_validate_json(json.dumps({
        **CHAT, "model": "m", "max_tokens": 5, "stop_sequences": ["q"], "top_p": 0.5}))
    assert _given(anthropic.to_request().params) == {"stop", "top_p"}
    responses = ResponsesRequest.model_validate_json(json.dumps({
        "input": "hi", "temperature": 0.5, "max_output_tokens": 20}))
    assert _given(responses.to_request().params) == {"temperature"}


async def test_the_scheduler_merges_its_table_into_every_request_it_starts() -> None:
    scheduler = Scheduler(FakeEngine(), sampling_defaults=TABLE)
    plain = GenerationRequest(prompt="[[tokens=2]]", params=SamplingParams())
    started = await scheduler.start(plain)
    assert values(started.prepared.request.params) == MERGED
    assert [e async for e in started.events()]  # it runs to its end
    mine = SamplingParams(temperature=1.5, given=frozenset({"temperature"}))
    submitted = scheduler.submit(GenerationRequest(prompt="[[tokens=2]]", params=mine))
    assert submitted.prepared.request.params.temperature == 1.5
    assert submitted.prepared.request.params.stop == ("END",)
    await scheduler.aclose(1.0)


def _load(tmp_path: Path, table: str) -> Settings:
    file = tmp_path / "tokenpipe.toml"
    file.write_text(f'[models.m]\nengine = "fake"\n{table}\n')
    return Settings.load(str(file), environ={})


def test_settings_give_the_scheduler_its_models_table(tmp_path: Path) -> None:
    settings = _load(tmp_path, 'temperature = 0\nstop = ["a", "b"]\nseed = 3')
    assert settings.sampling_defaults_for("m") == {"temperature": 0.0, "stop": ("a", "b"),
                                                   "seed": 3, "parallel_tool_calls": False}
    assert settings.sampling_defaults_for("other") == {"parallel_tool_calls": False}


def test_parallel_tool_calls_defaults_false_and_a_setting_or_model_table_changes_it(
        tmp_path: Path) -> None:
    settings = _load(tmp_path, "parallel_tool_calls = true")
    assert settings.sampling_defaults_for("m")["parallel_tool_calls"] is True
    assert settings.sampling_defaults_for("other")["parallel_tool_calls"] is False
    server = Settings.from_env({"TOKENPIPE_PARALLEL_TOOL_CALLS": "true"})
    assert server.sampling_defaults_for("x")["parallel_tool_calls"] is True


@pytest.mark.parametrize(("table", "message"), [
    ("temperature = 2.5", r":3: models\.m\.temperature: expected 0 to 2, got 2\.5"),
    ("top_p = 0", r":3: models\.m\.top_p: expected more than 0 and at most 1, got 0\.0"),
    ("top_k = -1", r":3: models\.m\.top_k: expected 0 to"),
    ("seed = -4", r":3: models\.m\.seed: expected 0 to"),
    ("repetition_penalty = 0", r"models\.m\.repetition_penalty: expected more than 0"),
    ('stop = [""]', r":3: models\.m\.stop: expected at most 16 strings of 1 to 256"),
    ("stop = [" + ", ".join(['"s"'] * 17) + "]", r"models\.m\.stop: expected at most 16"),
])
def test_a_tables_value_out_of_range_is_an_error_at_its_line(
        tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, table)
