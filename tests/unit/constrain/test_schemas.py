"""A schema as the grammar enforces it (constrain/schemas.py): objects with `properties` and
no `additionalProperties` closed, as llama.cpp's converter reads them, at every depth and
branch; `true` or a schema kept; allOf merged; integers bounded; the caller's schema never
changed; a hostile nesting refused without recursing. Checked with jsonschema: whatever the
enforced schema admits, the schema as sent admits too."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tokenpipe.constrain.schemas import INT_MAX, INT_MIN, MAX_DEPTH, SchemaTooDeep, enforced

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "client_schemas"


def admits(schema: Any, value: Any) -> bool:
    return bool(jsonschema.Draft202012Validator(schema).is_valid(value))


def test_an_object_with_properties_and_no_word_on_extra_keys_is_closed() -> None:
    sent = {"type": "object", "properties": {"city": {"type": "string"}}}
    got = enforced(sent)
    assert got["additionalProperties"] is False
    assert admits(got, {"city": "Paris"}) and not admits(got, {"city": "P", "x": 1})
    assert admits(sent, {"city": "P", "x": 1})  # the letter of JSON Schema: open


@pytest.mark.parametrize("extra", [True, {"type": "integer"}, {}])
def test_true_or_a_schema_for_extra_keys_keeps_them(extra: Any) -> None:
    got = enforced({"type": "object", "properties": {"a": {"type": "string"}},
                    "additionalProperties": extra})
    assert got["additionalProperties"] is not False
    assert admits(got, {"a": "x", "b": 1})


def test_objects_without_properties_stay_open() -> None:
    assert enforced({"type": "object"}) == {"type": "object"}
    assert enforced({"type": "object", "properties": {}})["additionalProperties"] is False


def test_nested_objects_arrays_defs_and_any_of_branches_are_closed() -> None:
    sent = {
        "type": "object",
        "properties": {
            "owner": {"type": "object", "properties": {"name": {"type": "string"}}},
            "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}},
            "either": {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                                 {"type": "null"}]},
        },
        "$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["cat"]}}}},
    }
    got = enforced(sent)
    assert got["properties"]["owner"]["additionalProperties"] is False
    assert got["$defs"]["Pet"]["additionalProperties"] is False
    assert got["properties"]["either"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in got["properties"]["either"]["anyOf"][1]
    assert not admits(got, {"pets": [{"kind": "cat", "age": 3}]})
    assert not admits(got, {"owner": {"name": "a", "age": 3}})
    assert admits(got, {"owner": {"name": "a"}, "pets": [{"kind": "cat"}], "either": None})


def test_the_callers_schema_is_never_changed() -> None:
    sent = json.loads((FIXTURES / "pydantic_person.json").read_text())["schema"]
    before = copy.deepcopy(sent)
    enforced(sent)
    assert sent == before


def test_a_property_named_like_a_keyword_is_a_name_not_a_schema() -> None:
    sent = {"type": "object", "properties": {
        "properties": {"type": "object", "properties": {"x": {"type": "string"}}},
        "enum": {"type": "string"}}}
    got = enforced(sent)
    assert set(got["properties"]) == {"properties", "enum"}
    assert got["properties"]["properties"]["additionalProperties"] is False
    assert admits(got, {"properties": {"x": "a"}, "enum": "b"})


def test_values_are_data_not_schemas() -> None:
    data = {"properties": {"a": 1}, "type": "integer"}
    got = enforced({"enum": [data], "const": data, "default": data, "examples": [data]})
    assert got["enum"] == [data] and got["const"] == data and got["examples"] == [data]


def test_all_of_branches_are_merged_as_llama_cpp_does() -> None:
    sent = {"allOf": [{"$ref": "#/$defs/Base"},
                      {"type": "object", "properties": {"b": {"type": "integer"}}}],
            "$defs": {"Base": {"type": "object", "properties": {"a": {"type": "string"}}}}}
    got = enforced(sent)
    assert admits(got, {"a": "x", "b": 1})
    assert not admits(got, {"a": "x", "b": 1, "c": 2})
    assert got["$defs"]["Base"]["additionalProperties"] is False  # closed where used alone


def test_unbounded_integers_are_bounded_and_bounds_kept() -> None:
    got = enforced({"type": "object", "properties": {
        "n": {"type": "integer"}, "m": {"type": "integer", "minimum": 0}}})
    assert (got["properties"]["n"]["minimum"], got["properties"]["n"]["maximum"]) == (
        INT_MIN, INT_MAX)
    assert got["properties"]["m"]["minimum"] == 0


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_what_real_clients_send_is_closed_and_still_admits_their_answers(name: str) -> None:
    """The captured schemas (tests/fixtures/client_schemas, scripts/capture_client_schemas.py):
    each object closed; a value the enforced schema admits is one the schema as sent admits."""
    sent = json.loads((FIXTURES / f"{name}.json").read_text())["schema"]
    got = enforced(sent)
    jsonschema.Draft202012Validator.check_schema(got)
    closed = [n for n in _objects(got) if isinstance(n.get("properties"), dict)]
    assert closed and all(n.get("additionalProperties") is False for n in closed)
    assert "additionalProperties" not in json.dumps(sent)  # what made the issue


def _objects(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "properties" in item and isinstance(item["properties"], dict):
                found.append(item)
                stack.extend(item["properties"].values())
            stack.extend(v for k, v in item.items() if k != "properties")
        elif isinstance(item, list):
            stack.extend(item)
    return found


def test_a_hostile_nesting_is_refused_without_recursing() -> None:
    deep: Any = {"type": "integer"}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"a": deep}}
    started = time.perf_counter()
    with pytest.raises(SchemaTooDeep, match=str(MAX_DEPTH)):
        enforced(deep)
    assert time.perf_counter() - started < 1.0
    shallow: Any = {"type": "integer"}
    for _ in range(MAX_DEPTH // 2 - 1):
        shallow = {"type": "object", "properties": {"a": shallow}}
    assert enforced(shallow)["additionalProperties"] is False


@pytest.mark.parametrize(("schema", "words"), [
    ({"type": "object", "properties": {f"k{i}": {} for i in range(401)}}, "401 properties"),
    ({"anyOf": [{"type": "object"} for _ in range(2001)]}, "2002 objects"),
    ({"enum": ["x" * 1000] * 300}, "characters"),
])
def test_a_request_over_the_size_budget_is_refused_before_any_compile(
        schema: Any, words: str) -> None:
    from tokenpipe.constrain.grammars import check_budget, schema_text
    from tokenpipe.errors import BadRequest
    from tokenpipe.types import GenerationRequest, OutputFormat, Tool

    fmt = GenerationRequest(prompt="x", format=OutputFormat("json_schema", schema_text(schema)))
    with pytest.raises(BadRequest, match=words) as caught:
        check_budget(fmt)
    assert caught.value.param == "response_format"
    tools = GenerationRequest(prompt="x", tools=(Tool("f", None, schema_text(schema)),))
    with pytest.raises(BadRequest) as caught:
        check_budget(tools)
    assert caught.value.param == "tools"
