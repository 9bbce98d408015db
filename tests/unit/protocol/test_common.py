"""The request helpers every door shares (protocol/common.py): the JSON body read in no
door's words and worded by each, the lone-surrogate check and the neutral-values-only
validator, each raising the pydantic error kind its door maps."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from tokenpipe.protocol.anthropic.errors import bad_body as anthropic_words
from tokenpipe.protocol.common import LONE_SURROGATE, BadBody, check_text, neutral_only, read_json
from tokenpipe.protocol.ollama.errors import bad_body as ollama_words
from tokenpipe.protocol.openai.errors import bad_body as openai_words


@pytest.mark.parametrize(("raw", "strict", "kind", "detail"), [
    (b"", False, "empty", ""),
    (b"  \n", True, "empty", ""),
    (b"  \n", False, "syntax", "Expecting value"),
    (b'{"a": }', False, "syntax", "Expecting value"),
    (b'{"a": NaN}', True, "constant", "NaN"),
    (b"[" * 100_000 + b"]" * 100_000, False, "deep", ""),
    (b"1" * 5000, False, "value", "Exceeds the limit"),
    (b'"\xff"', False, "value", "codec can't decode"),
])
def test_read_json_says_why_in_no_doors_words(raw: bytes, strict: bool, kind: str,
                                               detail: str) -> None:
    with pytest.raises(BadBody) as info:
        read_json(raw, strict=strict)
    assert info.value.kind == kind
    assert detail in info.value.detail


def test_read_json_reads_json_whatever_the_content_type_and_nan_unless_strict() -> None:
    assert read_json(b'{"a": [1, "x"]}') == {"a": [1, "x"]}
    value = read_json(b'{"a": NaN}')
    assert value["a"] != value["a"]  # NaN, as Python's json reads it


def test_each_door_words_a_bad_body_as_it_did() -> None:
    syntax = BadBody("syntax", "Expecting value", 1, 7)
    assert openai_words(syntax).message == ("We could not parse the JSON body of your "
                                            "request: Expecting value")
    assert anthropic_words(syntax).message == ("The request body is not valid JSON: "
                                               "Expecting value at line 1 column 7")
    assert ollama_words(syntax).message == ("the body is not JSON: Expecting value (line 1, "
                                            "column 7)")
    deep = BadBody("deep")
    assert openai_words(deep).message.endswith("it is nested too deeply")
    assert anthropic_words(deep).message == ("The request body is not JSON we take: it is "
                                             "nested too deeply")
    assert ollama_words(BadBody("constant", "Infinity")).message == (
        "the body is not JSON: Infinity is not a JSON number")
    assert ollama_words(BadBody("empty")).message == "missing request body"
    assert openai_words(BadBody("empty")).message == ("The request body is empty: send a "
                                                      "JSON object.")
    for words in (openai_words, anthropic_words, ollama_words):
        assert words(syntax).status == 400


class _Body(BaseModel):
    text: Annotated[str, neutral_only((), "never")] | None = None
    said: Annotated[Any, neutral_only((0, ""), "only zero or empty", kind="unsupported")] = None


def test_neutral_only_lets_none_and_neutral_values_through_and_refuses_the_rest() -> None:
    assert _Body(said=0).said is None and _Body(said="").said is None
    assert _Body.model_validate({"said": None}).said is None
    with pytest.raises(ValidationError) as info:
        _Body(said=False)  # equal to 0, but not an int: refused
    error = info.value.errors()[0]
    assert (error["type"], error["msg"]) == ("unsupported", "only zero or empty")
    with pytest.raises(ValidationError) as info:
        _Body(text="x")
    assert info.value.errors()[0]["type"] == "unsupported_parameter"


def test_check_text_refuses_a_lone_surrogate_with_the_doors_kind() -> None:
    assert check_text("héllo 🎉") == "héllo 🎉"
    assert check_text(5) == 5
    with pytest.raises(PydanticCustomError) as info:
        check_text("a\ud800b", kind="invalid_text", at="messages.0.content")
    assert info.value.type == "invalid_text"
    assert info.value.message() == LONE_SURROGATE
    assert info.value.context == {"at": "messages.0.content"}
