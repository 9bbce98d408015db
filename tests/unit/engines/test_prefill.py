"""Assistant prefill (engines/prefill.py): a chat ending in an assistant message without
tool calls is rendered as the prompt of a new answer over the earlier messages, then that
message's content verbatim, with no end of turn; under an output format the grammar goes
on from it (prefill and answer together validate)."""

from __future__ import annotations

import pytest

from tests.conftest import THREADS
from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.engines.prefill import continuation, prefill_of, render_with_prefill
from tokenpipe.types import (
    GenerationRequest,
    Message,
    OutputFormat,
    SamplingParams,
    Tool,
    ToolCall,
    ToolChoice,
)

ASKED = (Message("system", "Be brief."), Message("user", "What is the capital of France?"))
PREFILLED = GenerationRequest(messages=(*ASKED, Message("assistant", "The capital of France is")))


def test_only_a_last_assistant_message_without_calls_is_a_prefill() -> None:
    assert prefill_of(PREFILLED) == "The capital of France is"
    assert prefill_of(GenerationRequest(messages=ASKED)) is None
    called = Message("assistant", "", tool_calls=(ToolCall("call_1", "f", "{}"),))
    assert prefill_of(GenerationRequest(messages=(*ASKED, called))) is None
    assert prefill_of(GenerationRequest(prompt="raw text")) is None


def test_a_continuation_is_the_request_with_the_text_so_far_as_the_answer_begun() -> None:
    params = SamplingParams(max_tokens=50, temperature=0.7, seed=7)
    asked = GenerationRequest(messages=ASKED, params=params)
    going_on = continuation(asked, "Paris", 40)
    assert going_on is not None
    assert going_on.messages == (*ASKED, Message("assistant", "Paris"))
    assert going_on.params.max_tokens == 40 and "max_tokens" in going_on.params.given
    assert (going_on.params.seed, going_on.params.temperature) == (7, 0.7)
    # a prefill of the client's own grows; a raw prompt gets the text appended
    again = continuation(PREFILLED, " Paris", 10)
    assert again is not None and again.messages == (*ASKED, Message(
        "assistant", "The capital of France is Paris"))
    raw = continuation(GenerationRequest(prompt="The capital is"), " Paris", 5)
    assert raw is not None and raw.prompt == "The capital is Paris"
    # tools offered but not to be called are only part of the prompt
    quiet = GenerationRequest(messages=ASKED, tools=(Tool("f"),), tool_choice=ToolChoice("none"))
    assert continuation(quiet, "Paris", 5) is not None


@pytest.mark.parametrize("request_", [
    GenerationRequest(messages=ASKED, format=OutputFormat("json_object")),
    GenerationRequest(messages=ASKED, tools=(Tool("f"),)),
    GenerationRequest(messages=ASKED, params=SamplingParams(logprobs=2)),
], ids=["format", "tools", "logprobs"])
def test_no_continuation_where_it_would_not_be_the_same_answer(
        request_: GenerationRequest) -> None:
    assert continuation(request_, "{", 10) is None


def test_no_continuation_with_no_tokens_left() -> None:
    assert continuation(GenerationRequest(messages=ASKED), "Paris", 0) is None


def test_the_earlier_messages_get_the_generation_prompt_then_the_start_verbatim() -> None:
    seen: list[GenerationRequest] = []

    def render(request: GenerationRequest) -> str:
        seen.append(request)
        return "<prompt>"

    assert render_with_prefill(PREFILLED, render) == "<prompt>The capital of France is"
    assert seen[0].messages == ASKED and seen[0].params == PREFILLED.params
    plain = GenerationRequest(messages=ASKED)
    assert render_with_prefill(plain, render) == "<prompt>" and seen[1] is plain


def test_the_fake_engine_leaves_the_turn_open() -> None:
    engine = FakeEngine()
    assert engine.render(PREFILLED) == (
        "<|system|>Be brief.<|end|><|user|>What is the capital of France?<|end|>"
        "<|assistant|>The capital of France is")


@pytest.mark.model
@pytest.mark.parametrize("name", ["llamacpp", "transformers"])
async def test_the_model_template_renders_the_prefill(name: str,
                                                      request: pytest.FixtureRequest) -> None:
    pytest.importorskip({"llamacpp": "llama_cpp", "transformers": "transformers"}[name])
    if name == "transformers":  # the GGUF loaded once a session (tests/conftest.py)
        request.getfixturevalue("transformers_loads_once")
    from tokenpipe.config import engine_class

    engine = engine_class(name).from_options(EngineOptions(parallel=1, context_size=512,
                                                           threads=THREADS))
    try:
        await engine.load()
        new_turn = engine.render(GenerationRequest(messages=ASKED))
        closed = engine.render(GenerationRequest(messages=(
            *ASKED, Message("assistant", "The capital of France is"), Message("user", "ok"))))
        # SmolLM2's ChatML: the new turn ends in its generation prompt, and a closed
        # assistant turn in the template ends with <|im_end|>; the prefill has neither after it
        assert new_turn.endswith("<|im_start|>assistant\n")
        assert "The capital of France is<|im_end|>" in closed
        assert engine.render(PREFILLED) == new_turn + "The capital of France is"
    finally:
        await engine.aclose()


@pytest.mark.model
@pytest.mark.parametrize("name", ["llamacpp", "transformers"])
async def test_a_prefill_under_a_format_is_continued_in_the_format(
        name: str, request: pytest.FixtureRequest) -> None:
    import json

    pytest.importorskip({"llamacpp": "llama_cpp", "transformers": "transformers"}[name])
    if name == "transformers":  # the GGUF loaded once a session (tests/conftest.py)
        request.getfixturevalue("transformers_loads_once")
    from tokenpipe.config import engine_class
    from tokenpipe.types import EngineText

    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green"]}},
              "required": ["colour"]}
    prefill = '{"colour": "'
    engine = engine_class(name).from_options(EngineOptions(parallel=1, context_size=512,
                                                           threads=THREADS))
    try:
        await engine.load()
        prepared = engine.prepare(GenerationRequest(
            messages=(Message("user", "Pick a colour."), Message("assistant", prefill)),
            format=OutputFormat("json_schema", json.dumps(schema), "c"),
            params=SamplingParams(max_tokens=20, temperature=0)), 20)
        text = "".join([e.text async for e in engine.stream(prepared)
                        if isinstance(e, EngineText)])
        assert json.loads(prefill + text)["colour"] in ("red", "green"), text
    finally:
        await engine.aclose()


def test_an_answer_goes_on_from_its_token_ids() -> None:
    """from_ids: a raw prompt of the prompt's ids and the answer's, what is left of
    max_tokens, no tools; None with stop strings (text held back while its ids are
    out) and where `continuation` is None."""
    from tokenpipe.engines.prefill import from_ids
    from tokenpipe.types import GenerationRequest, Message, SamplingParams

    chat = GenerationRequest(messages=(Message("user", "hi"),),
                             params=SamplingParams(max_tokens=10, seed=4))
    going_on = from_ids(chat, (1, 2), (3, 4, 5), 7)
    assert going_on is not None and going_on.messages is None and going_on.prompt == ""
    assert going_on.prompt_ids == (1, 2, 3, 4, 5)
    assert going_on.params.max_tokens == 7 and going_on.params.seed == 4
    stopped = GenerationRequest(messages=(Message("user", "hi"),),
                                params=SamplingParams(stop=("END",)))
    assert from_ids(stopped, (1,), (2,), 5) is None
    assert from_ids(chat, (1,), (2,), 0) is None


async def test_the_fake_goes_on_from_ids_at_every_token_even_inside_a_character() -> None:
    """A take-over from token ids (server/state/follower.py) on the fake engine, after each
    of an answer's tokens: its script holds characters of 3 and 4 bytes that tokens split;
    the text sent so far and the continuation's make the uninterrupted answer."""
    from tokenpipe.engines.fake import fake_token_bytes
    from tokenpipe.engines.prefill import from_ids
    from tokenpipe.text import Utf8Decoder
    from tokenpipe.types import EngineText

    engine = FakeEngine(pace_ms=0)
    request = GenerationRequest(messages=(Message("user", "Hello"),),
                                params=SamplingParams(max_tokens=120))
    prepared = engine.prepare(request, 120)
    events = [e async for e in engine.stream(prepared) if isinstance(e, EngineText)]
    whole = "".join(e.text for e in events)
    ids = [i for e in events for i in e.token_ids]
    assert len(ids) == 120 and any(ord(c) > 0xFFFF for c in whole)  # emoji: 4 bytes
    split = 0
    for k in range(1, len(ids)):
        data = b"".join(fake_token_bytes(i) for i in ids[:k])
        sent = Utf8Decoder().feed(data)
        split += len(sent.encode()) < len(data)
        going_on = from_ids(request, tuple(prepared.prompt_ids), tuple(ids[:k]), 120 - k)
        assert going_on is not None
        rest = "".join([e.text async for e in engine.stream(engine.prepare(going_on, 120 - k))
                        if isinstance(e, EngineText)])
        assert sent + rest == whole, (k, sent[-10:], rest[:10])
    assert split  # some of those went on inside a character
