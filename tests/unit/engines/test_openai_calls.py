"""The openai engine's CallAssembler: an upstream's calls cut at any boundaries, in any of
the shapes servers send, come out as the same well-formed Parts."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpipe.engines.openai.calls import CallAssembler
from tokenpipe.errors import EngineError
from tokenpipe.types import Part

CALLS = [("get_weather", '{"city": "Zürich 日本", "days": [1, 2]}'),
         ("search", '{"q": "a \\"b\\" {c}"}'), ("noop", "{}")]


def run(chunks: list[Any], *, whole: bool = True) -> tuple[list[Part], CallAssembler]:
    a = CallAssembler("http://up")
    parts = [p for chunk in chunks for p in a.feed(chunk)]
    return parts + a.finish(whole=whole), a


def assembled(parts: list[Part]) -> list[tuple[int, str | None, str | None, str]]:
    """(index, id, name, arguments) per call, checking that each call's first Part, and
    only that one, has its id and name, and that indexes begin in order."""
    calls: dict[int, list[Any]] = {}
    for p in parts:
        assert p.channel == "tool_call"
        if p.index not in calls:
            assert p.call_id and p.name and p.index == len(calls)
            calls[p.index] = [p.index, p.call_id, p.name, p.text]
        else:
            assert p.call_id is None and p.name is None
            calls[p.index][3] += p.text
    return [tuple(c) for c in calls.values()]  # type: ignore[misc]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.lists(st.integers(0, 60), max_size=6), min_size=3, max_size=3),
       index_offset=st.integers(0, 5), gap=st.integers(1, 3), id_each=st.booleans())
def test_any_cutting_of_any_numbering_gives_the_same_calls(
        cuts: list[list[int]], index_offset: int, gap: int, id_each: bool) -> None:
    chunks: list[Any] = []
    for n, ((name, args), cut) in enumerate(zip(CALLS, cuts, strict=True)):
        index = index_offset + n * gap
        bounds = sorted({0, len(args), *(c for c in cut if c < len(args))})
        pieces = [args[a:b] for a, b in itertools.pairwise(bounds)]
        first = {"index": index, "id": f"up_{n}", "type": "function",
                 "function": {"name": name, "arguments": ""}}
        chunks.append([first])
        for piece in pieces:
            d: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if id_each:
                d["id"] = f"up_{n}"
            chunks.append([d])
    parts, a = run(chunks)
    assert a.calls == 3
    assert assembled(parts) == [(n, f"up_{n}", name, args)
                                for n, (name, args) in enumerate(CALLS)]


def test_arguments_before_the_name_wait_for_it() -> None:
    parts, _ = run([[{"index": 0, "function": {"arguments": '{"a": '}}],
                    [{"index": 0, "function": {"name": "f"}}],
                    [{"index": 0, "function": {"arguments": "1}"}}]])
    [(index, call_id, name, args)] = assembled(parts)
    assert (index, name, args) == (0, "f", '{"a": 1}')
    assert call_id is not None and call_id.startswith("call_")  # none upstream: ours


def test_legacy_function_call_and_parsed_arguments() -> None:
    parts, _ = run([{"name": "f", "arguments": '{"x"'}, {"arguments": ": 2}"}])
    assert [(n, a) for _, _, n, a in assembled(parts)] == [("f", '{"x": 2}')]
    parts, _ = run([[{"index": 0, "function": {"name": "g", "arguments": {"y": [1]}}}]])
    assert [(n, json.loads(a)) for _, _, n, a in assembled(parts)] == [("g", {"y": [1]})]


@pytest.mark.parametrize(("chunks", "words"), [
    ([[{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{"}}]], "not JSON"),
    ([[{"index": 0, "function": {"name": "f", "arguments": "[1]"}}]], "not a JSON object"),
    ([[{"index": 0, "function": {"arguments": "{}"}}]], "without a function name"),
    ("nope", "not a list"),
    ([[3]], "not an object")])
def test_malformed_calls_are_clear_errors(chunks: Any, words: str) -> None:
    with pytest.raises(EngineError, match=words):
        run(chunks if isinstance(chunks, list) else [chunks])


def test_a_cut_answer_keeps_what_came() -> None:
    parts, _ = run([[{"index": 0, "function": {"name": "f", "arguments": '{"a": "b'}}]],
                   whole=False)
    assert [(n, a) for _, _, n, a in assembled(parts)] == [("f", '{"a": "b')]
