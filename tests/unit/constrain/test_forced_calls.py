"""How many calls an answer may hold (issue 30, item 2): a named function is one call, always;
`required` one unless the client asked for more; `auto` the server's default (false) where
the client said nothing; and with several allowed, the answer ends where the model repeats a
call (constrain/tools.py resolved_choice, constrain/repeats.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tokenpipe.constrain.repeats import RepeatedCalls
from tokenpipe.constrain.tools import resolved_choice, several_calls, tool_call_splitter, tools_lark
from tokenpipe.types import GenerationRequest, Part, Tool, ToolChoice


@pytest.mark.parametrize(("mode", "asked", "default", "several"), [
    ("function", True, True, False), ("function", None, True, False),
    ("required", None, True, False), ("required", False, True, False),
    ("required", True, False, True),
    ("auto", None, False, False), ("auto", None, True, True), ("auto", True, False, True),
    ("auto", False, True, False),
])
def test_how_many_calls_an_answer_may_hold(mode: Any, asked: bool | None, default: bool,
                                           several: bool) -> None:
    choice = resolved_choice(ToolChoice(mode, "f" if mode == "function" else None, asked),
                             default)
    assert choice.parallel is several and several_calls(choice) is several


def test_the_grammar_of_a_named_function_has_room_for_one_call() -> None:
    tools = (Tool("f"), Tool("g"))
    one = tools_lark(GenerationRequest(prompt="x", tools=tools,
                                       tool_choice=ToolChoice("function", "f", True)))
    assert "calls: call\n" in one
    many = tools_lark(GenerationRequest(prompt="x", tools=tools,
                                        tool_choice=ToolChoice("required", None, True)))
    assert "calls: call (" in many


def calls(*written: tuple[str, str]) -> str:
    return "\n".join(f'<tool_call>\n{{"name": "{n}", "arguments": {a}}}\n</tool_call>'
                     for n, a in written)


def run(text: str, chunk: int) -> tuple[list[Any], bool]:
    split, repeats = tool_call_splitter(), RepeatedCalls()
    out: list[Any] = []
    for i in range(0, len(text), chunk):
        out += repeats.feed(split.feed(text[i:i + chunk]))
        if repeats.repeated:
            return out, True
    return out + repeats.feed(split.flush()) + repeats.flush(), False


def made(out: list[Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for p in out:
        assert isinstance(p, Part)
        if p.name is not None:
            found.append((p.name, p.text))
        else:
            found[-1] = (found[-1][0], found[-1][1] + p.text)
    return found


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_a_repeated_call_ends_the_answer_and_is_not_passed_on(chunk: int) -> None:
    text = calls(("f", '{"a": 1}'), ("g", '{"a": 1}'), ("f", '{"a": 2}'), ("f", '{"a":1}'),
                 ("h", "{}"))
    out, repeated = run(text, chunk)
    assert repeated
    assert made(out) == [("f", '{"a": 1}'), ("g", '{"a": 1}'), ("f", '{"a": 2}')]
    assert [p.index for p in out if p.name] == [0, 1, 2]


@pytest.mark.parametrize("chunk", [1, 5, 1000])
def test_different_calls_pass_whole_and_a_cut_one_is_kept(chunk: int) -> None:
    text = calls(("f", '{"a": 1}'), ("f", '{"a": 10}'), ("g", "{}"))
    out, repeated = run(text, chunk)
    assert not repeated
    assert made(out) == [("f", '{"a": 1}'), ("f", '{"a": 10}'), ("g", "{}")]
    cut, repeated = run(text[: text.index('{"a": 10') + 5], chunk)  # max_tokens inside
    assert not repeated and made(cut)[-1] == ("f", '{"a":')


def test_content_passes_untouched() -> None:
    out, repeated = run("just text, no calls", 4)
    assert "".join(out) == "just text, no calls" and not repeated
