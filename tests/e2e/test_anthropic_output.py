"""The Anthropic door's `output_config.format` (JSON output under a schema) and
`thinking.budget_tokens` (a thinking section of at most that many tokens, then the
answer, behind a template that can think), with the official `anthropic` SDK on the real
bundled model, whole and streamed;
and both refused with a clear 400 where the engine cannot apply them (the fake engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import pytest
from pydantic import BaseModel

from tests.conftest import ServerProcess, closed_after_test
from tests.e2e.test_reasoning import QWEN3_LIKE_TEMPLATE

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 30},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "colours": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                "minItems": 1, "maxItems": 3}},
    "required": ["name", "age", "colours"], "additionalProperties": False}
ASK: Any = [{"role": "user", "content": "Describe a person as JSON."}]
GREEDY = {"temperature": 0}  # the SDK sends temperature through extra_body


def client(server: ServerProcess) -> anthropic.Anthropic:
    c = closed_after_test(anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0,
                                              timeout=120))
    return c


@pytest.mark.model
def test_output_config_format_is_json_valid_against_the_schema(
        model_server: ServerProcess) -> None:
    c = client(model_server)
    args: Any = {"model": MODEL, "max_tokens": 200, "messages": ASK,
                 "output_config": {"format": {"type": "json_schema", "schema": PERSON}},
                 "extra_body": GREEDY}
    whole = c.messages.create(**args)
    assert whole.stop_reason == "end_turn"
    [block] = whole.content
    assert block.type == "text"
    jsonschema.validate(json.loads(block.text), PERSON)
    with c.messages.stream(**args) as stream:
        streamed = "".join(stream.text_stream)
    assert streamed == block.text  # greedy: the same answer

    class Person(BaseModel):
        name: str
        age: int

    parsed = c.messages.parse(model=MODEL, max_tokens=200, messages=ASK,
                              output_format=Person, extra_body=GREEDY)
    assert isinstance(parsed.parsed_output, Person)


@pytest.mark.model
def test_thinking_budget_tokens_ends_the_section_and_the_answer_starts(
        live_server: Any, tmp_path: Path) -> None:
    """The bundled model behind a template that can think but does not open the section
    (Qwen3's kind; its own template has none: it refuses thinking, test_thinking_rule.py):
    with thinking enabled and a budget the grammar opens the section, and closes it once
    the budget is spent."""
    from tests.unit.constrain.test_guides import Vocab  # the bundled model's vocabulary

    template = tmp_path / "thinking.jinja"
    template.write_text(QWEN3_LIKE_TEMPLATE)
    vocab = Vocab()
    c = closed_after_test(anthropic.Anthropic(
        base_url=live_server("--chat-template", str(template), "--parallel", "2"),
        api_key="unused", max_retries=0, timeout=120))

    def tokens(text: str) -> int:
        import llama_cpp as lc

        data = text.encode()
        buf = (lc.llama_token * (len(data) + 8))()
        return int(lc.llama_tokenize(vocab.handle, data, len(data), buf, len(buf), False,
                                     False))

    spent = {}
    for budget in (6, 40):
        args: Any = {"model": MODEL, "max_tokens": 120, "messages": [
            {"role": "user", "content": "What is 2 + 2? Think first."}],
                     "thinking": {"type": "enabled", "budget_tokens": budget},
                     "extra_body": GREEDY}
        whole = c.messages.create(**args)
        kinds = [b.type for b in whole.content]
        assert kinds[0] == "thinking" and kinds[1:] in (["text"], [])
        thought = whole.content[0].thinking  # type: ignore[union-attr]
        # tokenized alone it may differ by a token or two from how the model wrote it
        assert 0 < tokens(thought) <= budget + 2, thought
        if whole.stop_reason == "end_turn":
            assert kinds == ["thinking", "text"]
        with c.messages.stream(**args) as stream:
            final = stream.get_final_message()
        assert [b.model_dump() for b in final.content] == [
            b.model_dump() for b in whole.content]
        spent[budget] = tokens(thought)
    assert spent[40] > spent[6]  # the small budget cut the section the large one did not
    import llama_cpp as lc

    lc.llama_model_free(vocab.model)


@pytest.mark.parametrize(("extra", "words"), [
    ({"output_config": {"format": {"type": "json_schema", "schema": PERSON}}},
     "output_config.format: the fake engine cannot constrain its output to a format"),
    ({"thinking": {"type": "enabled", "budget_tokens": 10}},
     "thinking.budget_tokens: the fake engine cannot constrain its output to a thinking "
     "budget"),
    ({"output_config": {"effort": "high"}}, "output_config.effort"),
])
def test_what_the_engine_cannot_apply_is_a_clear_400(fake_server: ServerProcess,
                                                    extra: dict[str, Any], words: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client(fake_server).messages.create(model="fake", max_tokens=50, messages=ASK,
                                            **extra)
    assert words in info.value.message
    # a budget that max_tokens reaches first asks for nothing: the fake engine answers
    ok = client(fake_server).messages.create(
        model="fake", max_tokens=20, messages=ASK,
        thinking={"type": "enabled", "budget_tokens": 1024})
    assert ok.content
