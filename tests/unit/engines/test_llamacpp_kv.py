"""The llama.cpp engine's KV cache: shared by every sequence (the default), one conversation
may use the whole context; a sequence starts when its prompt and answer fit beside the
running ones, emptying idle slots' caches to make room, else waits for one to end. The
split cache keeps a fixed share a sequence, and its answers bit-identical whatever ran
before."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.llamacpp import LlamaCppEngine
from tokenpipe.errors import ContextOverflow
from tokenpipe.types import (
    EngineFinish,
    EngineText,
    FinishReason,
    GenerationRequest,
    Message,
    SamplingParams,
)

pytestmark = pytest.mark.model

CONTEXT, PARALLEL = 1024, 4


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine(EngineOptions(context_size=CONTEXT, parallel=PARALLEL, threads=2))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


def long_request(topic: str, words: int, max_tokens: int, logprobs: bool = False
                 ) -> GenerationRequest:
    text = f"Notes on {topic}: " + " ".join(f"{topic}{i % 7}" for i in range(words))
    return GenerationRequest(messages=(Message("user", text + "\nSummarize the notes."),),
                             params=SamplingParams(max_tokens=max_tokens, temperature=0,
                                                   logprobs=0 if logprobs else None))


async def run(engine: LlamaCppEngine, request: GenerationRequest,
              log: list[str] | None = None, name: str = "") -> tuple[str, list[float], int]:
    prepared = engine.prepare(request, 64)
    text, logprobs, prompt = "", [], len(prepared.prompt_ids)
    async for event in engine.stream(prepared):
        if isinstance(event, EngineText):
            if log is not None and not text and event.text:
                log.append(f"{name} first")
            text += event.text
            logprobs.extend(lp.logprob for lp in event.logprobs)
        elif isinstance(event, EngineFinish):
            assert event.reason in (FinishReason.STOP, FinishReason.LENGTH)
            if log is not None:
                log.append(f"{name} end")
    return text, logprobs, prompt


async def test_one_conversation_may_use_the_whole_context(engine: LlamaCppEngine) -> None:
    assert engine.info.context_tokens == CONTEXT  # not CONTEXT / PARALLEL
    text, _, prompt = await run(engine, long_request("rivers", 400, 16))
    assert prompt > 3 * (CONTEXT // PARALLEL)  # three slices' worth in one sequence
    assert text
    with pytest.raises(ContextOverflow):  # the whole context is still the bound
        engine.prepare(long_request("rivers", 400, CONTEXT), 64)


async def test_a_sequence_waits_for_room_then_runs(engine: LlamaCppEngine) -> None:
    """Two prompts that do not fit together: the second starts when the first ends (no
    error, nothing truncated); two small ones beside them still run at once."""
    engine.forget_cache()
    log: list[str] = []
    big_a, big_b = long_request("stones", 250, 24), long_request("clouds", 250, 24)
    assert 2 * len(engine.prepare(big_a, 64).prompt_ids) + 48 > CONTEXT
    results = await asyncio.gather(run(engine, big_a, log, "a"), run(engine, big_b, log, "b"))
    assert all(text for text, _, _ in results)
    assert log.index("a end") < log.index("b first")  # b waited for a's cells


async def test_idle_slots_caches_are_emptied_to_make_room(engine: LlamaCppEngine) -> None:
    engine.forget_cache()
    before = engine._slots.evicted_tokens
    topics = ["trees", "ships", "lamps", "roads"]  # at once: each its own slot, kept after
    await asyncio.gather(*(run(engine, long_request(topic, 100, 8)) for topic in topics))
    assert engine._slots.evicted_tokens == before  # four caches of ~220 cells fit 1024
    text, _, _ = await run(engine, long_request("bells", 350, 8))
    assert text
    assert engine._slots.evicted_tokens > before  # older caches made room for it


async def test_split_cache_answers_stay_bit_identical_after_a_fragmenting_load() -> None:
    """With the split cache each sequence's cells stay in order in its own stream, so the
    same request's logprobs are bit-identical after any other traffic (the shared cache
    cannot promise that once it fragments: docs/determinism.md)."""
    eng = LlamaCppEngine(EngineOptions(context_size=CONTEXT, parallel=PARALLEL, threads=2,
                                       kv_cache="split"))
    await eng.load()
    try:
        assert eng.info.context_tokens == CONTEXT // PARALLEL
        probe = GenerationRequest(
            messages=(Message("user", "Explain in detail how a bicycle gear works."),),
            params=SamplingParams(max_tokens=40, temperature=0, logprobs=0))
        _, alone, _ = await run(eng, probe)
        rnd = random.Random(1)
        for _ in range(2):
            load = [long_request(f"t{rnd.randint(0, 99)}", rnd.randint(0, 30),
                                 rnd.randint(4, 40)) for _ in range(6)]
            await asyncio.gather(*(run(eng, r) for r in load))
            (_, again, _), _ = await asyncio.gather(
                run(eng, probe), run(eng, long_request("poem", 30, 30)))
            assert again == alone
    finally:
        await eng.aclose()
