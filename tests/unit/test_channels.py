"""text.ToolCallSplitter and text.ReasoningSplitter: an answer in the tool-call format (or
with a thinking section), however the engine's pieces cut
it, comes out as the same content and the same calls (issue 17: arguments never lost when a
call comes in one delta, the id and name on the first part only, stable indexes)."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpipe.constrain.tools import BETWEEN, CLOSE, HEAD, MID, OPEN, call_text
from tokenpipe.text import ReasoningSplitter, ToolCallSplitter
from tokenpipe.types import Part, ToolCall


def splitter() -> ToolCallSplitter:
    ids = (f"call_{i}" for i in itertools.count())
    return ToolCallSplitter(OPEN, HEAD, MID, CLOSE, BETWEEN, lambda: next(ids))


def run(pieces: list[str]) -> list[str | Part]:
    s = splitter()
    out = [item for piece in pieces for item in s.feed(piece)]
    return out + s.flush()


def calls_of(items: list[str | Part]) -> tuple[str, list[tuple[str, str, str]]]:
    """(content, [(id, name, arguments)]), checking the shape a door relies on."""
    content = "".join(i for i in items if isinstance(i, str))
    calls: list[list[str]] = []
    for item in items:
        if isinstance(item, Part):
            assert item.channel == "tool_call"
            if item.call_id is not None:  # a call's first part: its id and name, no text
                assert item.index == len(calls) and item.name and item.text == ""
                calls.append([item.call_id, item.name, ""])
            else:
                assert item.index == len(calls) - 1 and item.name is None
                calls[-1][2] += item.text
    return content, [(a, b, c) for a, b, c in calls]


def cut(text: str, points: list[int]) -> list[str]:
    cuts = sorted({p % (len(text) + 1) for p in points})
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


ARGS = st.recursive(
    st.one_of(st.integers(-5, 5), st.booleans(), st.none(),
              st.text(alphabet='ab"\\}{]["<>/é\n', max_size=6)),
    lambda child: st.one_of(st.lists(child, max_size=3),
                            st.dictionaries(st.text("xyz", min_size=1, max_size=3), child,
                                            max_size=3)),
    max_leaves=6)
CALLS = st.lists(st.tuples(st.sampled_from(["get_weather", "search", "f"]),
                           st.dictionaries(st.sampled_from(["city", "q", "n"]), ARGS,
                                           max_size=3)),
                 min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(calls=CALLS, points=st.lists(st.integers(0, 10_000), max_size=40),
       spaced=st.booleans())
def test_calls_reassemble_whatever_the_cuts(calls: list[tuple[str, dict[str, object]]],
                                            points: list[int], spaced: bool) -> None:
    """Arguments written compact or spaced (the grammar allows whitespace), cut anywhere:
    the same calls, in order, each with its arguments JSON whole."""
    indent = 2 if spaced else None
    written = [ToolCall("x", name, json.dumps(args, indent=indent, ensure_ascii=False))
               for name, args in calls]
    text = BETWEEN.join(call_text(c) for c in written)
    content, got = calls_of(run(cut(text, points)))
    assert content == ""
    assert [(name, json.loads(args)) for _, name, args in got] == [
        (name, args) for name, args in calls]
    assert [call_id for call_id, _, _ in got] == [f"call_{i}" for i in range(len(calls))]


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60), points=st.lists(st.integers(0, 1000), max_size=20))
def test_text_that_is_not_a_call_passes_unchanged(text: str, points: list[int]) -> None:
    if text.startswith(OPEN):
        text = "x" + text
    content, got = calls_of(run(cut(text, points)))
    assert content == text and got == []


def test_a_call_in_one_piece_keeps_its_arguments() -> None:
    """The bug other servers have: a call that arrives in one delta loses its arguments."""
    text = call_text(ToolCall("x", "get_weather", '{"city": "Paris"}'))
    items = run([text])
    assert items == [Part("", "tool_call", 0, "call_0", "get_weather"),
                     Part('{"city": "Paris"}', "tool_call", 0)]


def test_the_tag_alone_is_held_then_released_as_content_if_no_call_follows() -> None:
    s = splitter()
    assert s.feed("<tool") == []
    assert s.feed("_cal") == []
    assert s.feed("ibrate") == ["<tool_calibrate"]
    assert s.feed(" more") == [" more"]


def test_a_call_cut_before_its_name_is_complete_is_no_call() -> None:
    s = splitter()
    assert s.feed(OPEN + HEAD + "get_wea") == []
    assert s.flush() == []
    assert s.calls == 0


def test_a_call_cut_inside_its_arguments_has_begun() -> None:
    items = run([OPEN + HEAD + "f" + MID + '{"a": [1, 2'])
    content, got = calls_of(items)
    assert content == ""
    assert got == [("call_0", "f", '{"a": [1, 2')]


# ---- the thinking section ---------------------------------------------------------------
def think(pieces: list[str], inside: bool = False) -> tuple[str, str]:
    s = ReasoningSplitter("<think>", "</think>", inside=inside)
    out = [item for piece in pieces for item in s.feed(piece)] + s.flush()
    reasoning = "".join(p.text for p in out if isinstance(p, Part))
    assert all(p.channel == "reasoning" for p in out if isinstance(p, Part))
    return reasoning, "".join(p for p in out if isinstance(p, str))


@settings(max_examples=300, deadline=None)
@given(thought=st.text(alphabet="ab<>/thinké\n", max_size=30),
       answer=st.text(alphabet="xy<>/thinkе\n", max_size=30),
       points=st.lists(st.integers(0, 1000), max_size=20), inside=st.booleans())
def test_a_thinking_section_splits_the_same_whatever_the_cuts(
        thought: str, answer: str, points: list[int], inside: bool) -> None:
    if "</think>" in thought:
        thought = thought.replace("</think>", "")
    answer = answer.lstrip("\n")
    text = ("" if inside else "<think>") + thought + "</think>\n\n" + answer
    assert think(cut(text, points), inside) == (thought, answer)


def test_an_answer_without_a_section_is_all_content() -> None:
    assert think(["<thi", "nking is fun"]) == ("", "<thinking is fun")
    assert think(["Hello <think>not at the start</think>"]) == (
        "", "Hello <think>not at the start</think>")


def test_a_section_cut_by_max_tokens_is_all_reasoning() -> None:
    assert think(["<think>still going</th"]) == ("still going</th", "")
