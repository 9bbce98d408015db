"""Structured output (issue 17, item 1) on a real server with the real bundled model: the
answer is generated under the schema's grammar, so it parses and validates, whole and
streamed alike, through the official openai SDK (`parse()`), LangChain, tokenpipe.v1 and
/v1/completions; a schema that cannot be enforced is a 400 naming `response_format`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.client import Client, ServerError

pytestmark = [pytest.mark.e2e, pytest.mark.model]

MODEL = "SmolLM2-135M-Instruct"


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                           max_retries=0,
                                           timeout=120))


class City(BaseModel):
    name: str
    country: str
    population: int


def ask(text: str) -> Any:
    return [{"role": "user", "content": text}]


def test_the_sdks_parse_returns_the_pydantic_model(model_server: ServerProcess) -> None:
    c = sdk(model_server)
    answer = c.chat.completions.parse(model=MODEL, messages=ask("Describe Paris as JSON."),
                                      response_format=City, temperature=0, max_tokens=120)
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, City)
    assert City.model_validate_json(choice.message.content or "") == choice.message.parsed


def test_the_sdks_stream_helper_parses_the_streamed_answer(model_server: ServerProcess
                                                            ) -> None:
    c = sdk(model_server)
    with c.chat.completions.stream(model=MODEL, messages=ask("Describe Rome as JSON."),
                                   response_format=City, temperature=0,
                                   max_tokens=120) as stream:
        pieces = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert len(pieces) > 3  # token by token, not one lump at the end
    assert isinstance(final.choices[0].message.parsed, City)
    assert "".join(pieces) == final.choices[0].message.content


def test_a_cut_answer_says_length_and_parse_refuses_it(model_server: ServerProcess) -> None:
    c = sdk(model_server)
    with pytest.raises(openai.LengthFinishReasonError):
        c.chat.completions.parse(model=MODEL, messages=ask("Describe Oslo as JSON."),
                                 response_format=City, temperature=0, max_tokens=5)
    cut = c.chat.completions.create(model=MODEL, messages=ask("Describe Oslo as JSON."),
                                    response_format={"type": "json_object"}, temperature=0,
                                    max_tokens=5)
    assert cut.choices[0].finish_reason == "length"
    assert (cut.choices[0].message.content or "").lstrip().startswith("{")


def test_json_object_on_completions_and_over_the_websocket(model_server: ServerProcess
                                                           ) -> None:
    c = sdk(model_server)
    done = c.completions.create(model=MODEL, prompt="A user record in JSON:", max_tokens=80,
                                temperature=0, extra_body={"response_format":
                                                           {"type": "json_object"}})
    assert done.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(done.choices[0].text), dict)
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=MODEL, prompt="A user record in JSON:", max_tokens=80, temperature=0,
        stream=True, extra_body={"response_format": {"type": "json_object"}}) if ch.choices)
    assert streamed == done.choices[0].text


async def test_a_schema_over_tokenpipe_v1(model_server: ServerProcess) -> None:
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}},
              "required": ["answer"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}}
    async with Client(model_server.ws_url) as client:
        gen = await client.generate(ask("Is the sky blue? Answer as JSON."),
                                    params={"response_format": fmt, "max_tokens": 60})
        text = await gen.collect()
        assert gen.end is not None and gen.end["finish_reason"] == "stop"
        jsonschema.validate(json.loads(text), schema)
        with pytest.raises(ServerError) as refused:
            bad = await client.generate(ask("x"), params={"response_format": {
                "type": "json_schema", "json_schema": {"name": "n", "schema": {
                    "not": {"type": "string"}}}}})
            await bad.collect()
        assert "params.response_format" in str(refused.value)
        again = await client.generate(ask("Say hi."), params={"max_tokens": 5})
        assert await again.collect()  # the connection serves on


@pytest.mark.parametrize(("fmt", "reason"), [
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": {"not": {}}}},
     "Unimplemented"),
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": {"$ref": "#/nope"}}},
     "does not exist"),
    ({"type": "json_schema", "json_schema": {"name": "n", "schema": False}}, "no value"),
    ({"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}}, "name"),
    ({"type": "json_schema"}, "json_schema"),
    ({"type": "yaml"}, "type"),
])
def test_a_format_that_cannot_be_enforced_is_a_400_naming_it(
        model_server: ServerProcess, fmt: dict[str, Any], reason: str) -> None:
    r = httpx.post(model_server.url + "/v1/chat/completions", timeout=30, json={
        "model": MODEL, "messages": ask("x"), "response_format": fmt})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"].startswith("response_format")
    assert reason in error["message"] + error["param"]
    ok = httpx.post(model_server.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": ask("Say hi."), "max_tokens": 3})
    assert ok.status_code == 200


def test_the_fake_engine_refuses_a_format_rather_than_ignore_it(fake_server: ServerProcess
                                                                ) -> None:
    r = httpx.post(fake_server.url + "/v1/chat/completions", timeout=30, json={
        "messages": ask("x"), "response_format": {"type": "json_object"}})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "response_format"


def test_langchain_with_structured_output(model_server: ServerProcess) -> None:
    import langchain_openai  # the test extra: a missing one fails, never skips
    llm = langchain_openai.ChatOpenAI(base_url=model_server.url + "/v1", api_key="unused",
                                      model=MODEL, temperature=0, max_tokens=120,
                                      max_retries=0)
    city = llm.with_structured_output(City, method="json_schema").invoke(
        "Describe Madrid as JSON.")
    assert isinstance(city, City)


# ---- property: many schemas, every answer validates, whole and streamed alike ----------
NAMES = st.sampled_from(["a", "b", "id", "name", "ok", "n", "tags", "kind"])
LEAVES = st.one_of(
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
              st.integers(-50, 50), st.integers(0, 500)),
    st.just({"type": "boolean"}),
    st.lists(st.sampled_from(["red", "green", "blue", "x y", "é"]), min_size=1, max_size=3,
             unique=True).map(lambda v: {"enum": v}),
    st.integers(1, 8).map(lambda n: {"type": "string", "maxLength": n}),
    st.just({"type": "string", "pattern": "^[a-z]{1,6}$"}),
    st.just({"type": "null"}),
)


def _containers(child: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.dictionaries(NAMES, child, min_size=1, max_size=3).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props),
                           "additionalProperties": False}),
        st.builds(lambda items, lo, extra: {"type": "array", "items": items, "minItems": lo,
                                            "maxItems": lo + extra},
                  child, st.integers(0, 2), st.integers(0, 2)),
        st.lists(child, min_size=2, max_size=2).map(lambda two: {"anyOf": two}),
    )


SCHEMAS = st.recursive(LEAVES, _containers, max_leaves=6).map(
    lambda s: s if s.get("type") == "object" else {
        "type": "object", "properties": {"value": s}, "required": ["value"],
        "additionalProperties": False})


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=SCHEMAS, temperature=st.sampled_from([0.0, 1.0]))
def test_every_answer_validates_whole_and_streamed(model_server: ServerProcess,
                                                   schema: dict[str, Any],
                                                   temperature: float) -> None:
    c = sdk(model_server)
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema,
                                                       "strict": True}}
    args: Any = {"model": MODEL, "messages": ask("Fill in this JSON."), "max_tokens": 300,
                 "temperature": temperature, "seed": 11, "response_format": fmt}
    whole = c.chat.completions.create(**args)
    text = whole.choices[0].message.content or ""
    assert whole.choices[0].finish_reason == "stop", (schema, text)
    jsonschema.validate(json.loads(text), schema)
    chunks = list(c.chat.completions.create(**args, stream=True))
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == text
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
