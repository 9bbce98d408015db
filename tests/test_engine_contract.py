"""One contract suite over every engine (STYLE.md item 10): the real llama.cpp and
transformers engines on the real bundled model, and the fake engine."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator

import pytest

from tests.conftest import THREADS, chat, close_after_texts
from tokenpipe.config import engine_class
from tokenpipe.constrain.grammars import schema_text
from tokenpipe.engines.base import PROGRESS_TOKENS, Engine, EngineOptions, bundled_model_path
from tokenpipe.errors import BadRequest, ContextOverflow
from tokenpipe.types import (
    EngineFinish,
    EngineProgress,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    OutputFormat,
    SamplingParams,
)

ENGINES = ["fake", "llamacpp", "transformers"]
NEEDS = {"llamacpp": "llama_cpp", "transformers": "transformers"}


def _model_for(name: str) -> str | None:
    if name == "transformers":  # the same bundled GGUF, loaded through transformers
        return str(bundled_model_path())
    return None


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    name = request.param
    if name in NEEDS and not os.environ.get("CI"):
        pytest.importorskip(NEEDS[name], reason=f"the {name} extra is not installed")
    if name == "transformers":  # the GGUF loaded once a session (tests/conftest.py)
        request.getfixturevalue("transformers_loads_once")
    options = EngineOptions(model=_model_for(name), context_size=4096, parallel=2, threads=THREADS)
    eng = engine_class(name).from_options(options)
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


COUNTED_UPSTREAM = {"openai"}  # engines without a tokenizer: the upstream counts the prompt


async def run(engine: Engine, request: GenerationRequest) -> tuple[str, EngineFinish, int]:
    """The stream's text, its finish and the prompt's tokens, checking the contract's shape:
    start, texts, finish; the prompt counted at start, or (an engine without a tokenizer)
    only in the finish's usage (and its ids, where its upstream sends them, in a second
    start before the text)."""
    prepared = engine.prepare(request, 64)
    events = [e async for e in engine.stream(prepared)]
    assert isinstance(events[0], EngineStart)
    if isinstance(events[1], EngineStart):  # the prompt's ids, learnt from an upstream
        assert engine.info.name in COUNTED_UPSTREAM and events[1].prompt_ids
        del events[1]
    assert isinstance(events[-1], EngineFinish)
    assert all(isinstance(e, EngineText) for e in events[1:-1])
    if engine.info.name in COUNTED_UPSTREAM:
        assert events[0].prompt_tokens is None
        prompt_tokens = events[-1].usage.prompt_tokens
        assert prompt_tokens > 0
    else:
        assert events[0].prompt_tokens == prepared.prompt_tokens
        prompt_tokens = prepared.prompt_tokens
    text = "".join(e.text for e in events[1:-1] if isinstance(e, EngineText))
    assert "\ufffd" not in text
    return text, events[-1], prompt_tokens


async def test_stream_has_start_text_finish_and_usage(engine: Engine) -> None:
    text, finish, prompt_tokens = await run(engine, chat("Say hello.", max_tokens=24))
    assert text
    assert finish.usage.prompt_tokens == prompt_tokens
    assert 1 <= finish.usage.completion_tokens <= 24
    assert finish.reason in (FinishReason.STOP, FinishReason.LENGTH)


async def test_a_long_prompt_reports_its_prefill_before_the_first_text(engine: Engine) -> None:
    """A prompt of more than PROGRESS_TOKENS: rising progress up to all of it, then text
    (the short prompts above send none: run() checks their shape). The fake engine's
    scripted prefill takes its directive."""
    lines = " ".join(f"Line {i}: the river runs past the old mill." for i in range(45))
    directive = "[[prefill_ms=1]][[tokens=3]] " if engine.info.name == "fake" else ""
    prepared = engine.prepare(chat(f"{directive}[{os.urandom(8).hex()}] {lines}",
                                   max_tokens=3), 64)
    total = prepared.prompt_tokens
    assert PROGRESS_TOKENS < total < 2 * PROGRESS_TOKENS + 200
    events = [e async for e in engine.stream(prepared)]
    first_text = next(i for i, e in enumerate(events) if isinstance(e, EngineText))
    progress = [(i, e) for i, e in enumerate(events) if isinstance(e, EngineProgress)]
    assert len(progress) >= 2 and all(i < first_text for i, _ in progress), events[:6]
    done = [e.done for _, e in progress]
    assert done == sorted(set(done)) and done[-1] == total, done
    assert all(e.total == total for _, e in progress)
    assert isinstance(events[-1], EngineFinish) and events[-1].usage.prompt_tokens == total


async def test_greedy_is_deterministic(engine: Engine) -> None:
    request = chat("Name three colors.", max_tokens=20)
    first = await run(engine, request)
    second = await run(engine, request)
    assert first[0] == second[0]


async def test_seeded_sampling_is_reproducible(engine: Engine) -> None:
    request = chat("Tell me a word.", max_tokens=16, temperature=0.9, top_p=0.95, seed=42)
    assert (await run(engine, request))[0] == (await run(engine, request))[0]


async def test_max_tokens_gives_length(engine: Engine) -> None:
    _, finish, _ = await run(engine, chat("Count from one to one hundred in words.",
                                          max_tokens=5))
    assert finish.reason is FinishReason.LENGTH
    assert finish.usage.completion_tokens == 5


async def test_raw_prompt_completion(engine: Engine) -> None:
    request = GenerationRequest(prompt="The capital of France is",
                                params=SamplingParams(max_tokens=8))
    text, finish, _ = await run(engine, request)
    assert text and finish.usage.completion_tokens <= 8


async def test_closing_the_stream_early_leaves_the_engine_usable(engine: Engine) -> None:
    prepared = engine.prepare(chat("Write a long story about the sea.", max_tokens=200), 64)
    await close_after_texts(engine.stream(prepared), 3)
    assert engine.healthy()
    text, _, _ = await run(engine, chat("Say hi.", max_tokens=8))
    assert text


async def test_concurrent_streams_all_finish(engine: Engine) -> None:
    """Each stream decoded beside others answers what it answers alone (greedy)."""
    requests = [chat(f"Say the number {i}.", max_tokens=12) for i in range(3)]
    requests.append(chat("Name the four seasons and one thing about each.", max_tokens=24))
    results = await asyncio.gather(*(run(engine, r) for r in requests))
    assert all(text for text, _, _ in results)
    alone = [(await run(engine, r))[0] for r in requests]
    assert [text for text, _, _ in results] == alone


async def test_cancelling_the_consumer_task_stops_the_stream(engine: Engine) -> None:
    prepared = engine.prepare(chat("Write a long essay.", max_tokens=300), 64)
    got = asyncio.Event()

    async def consume() -> None:
        async for event in engine.stream(prepared):
            if isinstance(event, EngineText) and event.text:
                got.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got.wait(), 60)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert engine.healthy()
    assert (await run(engine, chat("Hi.", max_tokens=4)))[0]


def test_context_overflow_is_refused(engine: Engine) -> None:
    limit = engine.info.context_tokens
    with pytest.raises(ContextOverflow):
        engine.prepare(chat("word " * 10, max_tokens=limit), 64)
    with pytest.raises(ContextOverflow):
        engine.prepare(GenerationRequest(prompt="word " * (limit + 10)), 64)


CAT = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 30},
    "colors": {"type": "array", "items": {"enum": ["black", "white", "orange", "grey"]},
               "minItems": 1, "maxItems": 3}},
    "required": ["name", "age", "colors"], "additionalProperties": False}
CONSTRAINED = {"llamacpp", "transformers", "openai"}  # the fake engine refuses a format


def formatted(text: str, schema: object, **params: object) -> GenerationRequest:
    fmt = OutputFormat("json_schema", schema_text(schema), "answer")
    return dataclasses.replace(chat(text, **params), format=fmt)


@pytest.mark.parametrize("temperature", [0.0, 1.5])
async def test_an_output_format_is_enforced_or_refused(engine: Engine,
                                                       temperature: float) -> None:
    """Greedy, and sampled hot (where an unconstrained model writes anything): the answer
    validates against the schema; an engine that cannot enforce one refuses it."""
    import jsonschema

    request = formatted("Describe a cat as JSON.", CAT, max_tokens=150,
                        temperature=temperature, seed=5)
    if engine.info.name not in CONSTRAINED:
        with pytest.raises(BadRequest) as refused:
            engine.prepare(request, 64)
        assert refused.value.param == "response_format"
        return
    text, finish, _ = await run(engine, request)
    assert finish.reason is FinishReason.STOP, text
    jsonschema.validate(json.loads(text), CAT)


async def test_formatted_and_free_streams_side_by_side(engine: Engine) -> None:
    """A grammar belongs to its own generation: beside free text and another schema, each
    answer is what it is alone. An engine that refuses formats refuses them while a free
    stream runs, and that stream answers as it does alone."""
    if engine.info.name not in CONSTRAINED:
        free = chat("Name three colors.", max_tokens=20)
        running = asyncio.ensure_future(run(engine, free))
        for _ in range(3):
            with pytest.raises(BadRequest):
                engine.prepare(formatted("Describe a cat as JSON.", CAT, max_tokens=150), 64)
        assert (await running)[0] == (await run(engine, free))[0]
        return
    requests = [formatted("Describe a cat as JSON.", CAT, max_tokens=150),
                chat("Name three colors.", max_tokens=20),
                formatted("Is water wet?", {"enum": ["yes", "no"]}, max_tokens=10)]
    together = [text for text, _, _ in await asyncio.gather(*(run(engine, r)
                                                              for r in requests))]
    alone = [(await run(engine, r))[0] for r in requests]
    assert together == alone
    assert json.loads(together[2]) in ("yes", "no")


async def test_logprobs_are_the_engines_own_or_refused(engine: Engine) -> None:
    """Greedy with logprobs: one entry per answer token (with the text that completes it),
    the chosen token the likeliest, log-probabilities of a distribution; the bytes of the
    tokens are the answer. Under a format, every alternative is one the grammar allows
    (none at -inf). An engine without logprobs refuses, naming the parameter."""
    request = chat("Name three colors.", max_tokens=16, logprobs=3)
    if not engine.logprobs:
        with pytest.raises(BadRequest) as refused:
            engine.prepare(request, 64)
        assert refused.value.param == "logprobs"
        return
    events = [e async for e in engine.stream(engine.prepare(request, 64))]
    texts = [e for e in events if isinstance(e, EngineText)]
    entries = [x for e in texts for x in e.logprobs]
    finish = events[-1]
    assert isinstance(finish, EngineFinish)
    generated = finish.usage.completion_tokens - (finish.reason is FinishReason.STOP)
    assert len(entries) == generated  # the end token is not part of the answer
    for e in entries:
        assert e.logprob <= 0.0 and len(e.top) == 3
        assert e.top[0][0] == e.token and e.top[0][1] == pytest.approx(e.logprob)
        assert [lp for _, lp, _ in e.top] == sorted((lp for _, lp, _ in e.top), reverse=True)
        assert sum(2.718281828 ** lp for _, lp, _ in e.top) <= 1.0 + 1e-6
    text = "".join(e.text for e in texts)
    assert b"".join(e.data for e in entries).decode() == text
    for e in texts:  # each piece's entries spell the piece
        assert b"".join(x.data for x in e.logprobs).decode() == e.text
    if engine.info.name in CONSTRAINED:
        shaped = dataclasses.replace(formatted("Is water wet?", {"enum": ["yes", "no"]},
                                               max_tokens=10), params=SamplingParams(
                                                   max_tokens=10, logprobs=5))
        events = [e async for e in engine.stream(engine.prepare(shaped, 64))]
        first = next(e for e in events if isinstance(e, EngineText) and e.logprobs)
        allowed = {t for t, _, _ in first.logprobs[0].top}
        assert allowed and all(("yes".startswith(t.strip('"')) or "no".startswith(
            t.strip('"'))) for t in allowed), allowed
