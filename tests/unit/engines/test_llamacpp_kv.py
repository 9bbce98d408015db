"""The llama.cpp engine's KV cache (engines/llamacpp/tiers.py). Shared: one conversation may
use the whole context; a sequence starts when its prompt and answer fit beside the running
ones, emptying idle slots' caches to make room, else waits for one to end. Split: a fixed
share a sequence, and its answers bit-identical whatever ran before. Tiered (the default):
a split half for what fits a stream, a shared half for longer conversations, which move
their cached turns over when they outgrow their stream."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

from tests.conftest import THREADS
from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.llamacpp import LlamaCppEngine
from tokenpipe.engines.llamacpp.migrate import one_stream
from tokenpipe.errors import ContextOverflow
from tokenpipe.types import (
    EngineFinish,
    EngineProgress,
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
    options = EngineOptions(context_size=CONTEXT, parallel=PARALLEL, threads=THREADS)
    eng = LlamaCppEngine(options.with_values(kv_cache="shared"))
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
    slots = engine._tiers[0].slots  # the one (shared) tier
    before = slots.evicted_tokens
    topics = ["trees", "ships", "lamps", "roads"]  # at once: each its own slot, kept after
    await asyncio.gather(*(run(engine, long_request(topic, 100, 8)) for topic in topics))
    assert slots.evicted_tokens == before  # four caches of ~220 cells fit 1024
    text, _, _ = await run(engine, long_request("bells", 350, 8))
    assert text
    assert slots.evicted_tokens > before  # older caches made room for it


async def test_split_cache_answers_stay_bit_identical_after_a_fragmenting_load() -> None:
    """With the split cache each sequence's cells stay in order in its own stream, so the
    same request's logprobs are bit-identical after any other traffic (the shared cache
    cannot promise that once it fragments: docs/determinism.md)."""
    options = EngineOptions(context_size=CONTEXT, parallel=PARALLEL, threads=THREADS)
    eng = LlamaCppEngine(options.with_values(kv_cache="split"))
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


# ---- tiered ---------------------------------------------------------------------------
# 2048 cells: 4 split streams of 256, and a shared pool of 1024 a conversation may fill


@pytest.fixture(scope="module")
def tiered() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine(EngineOptions(context_size=2 * CONTEXT, parallel=PARALLEL,
                                       threads=THREADS))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


def cached(engine: LlamaCppEngine, tier: int) -> list[int]:
    """Prompt tokens cached in each slot of a tier (0: split, 1: shared)."""
    return [len(tokens) for tokens in engine._tiers[tier].slots.cached]


def turns(*texts: str, max_tokens: int) -> GenerationRequest:
    roles = ("user", "assistant")
    return GenerationRequest(
        messages=tuple(Message(roles[i % 2], text) for i, text in enumerate(texts)),
        params=SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=0))


async def test_what_fits_a_stream_runs_split_the_rest_shared(tiered: LlamaCppEngine) -> None:
    split, shared = tiered._tiers
    assert not split.context.shared and split.context.context_tokens == CONTEXT // PARALLEL
    assert shared.shared and shared.context_tokens == CONTEXT
    assert tiered.info.context_tokens == CONTEXT  # what one conversation may use
    tiered.forget_cache()
    short = turns("Name three colours.", max_tokens=16)
    await run(tiered, short)
    assert max(cached(tiered, 0)) > 0 and cached(tiered, 1) == [0] * PARALLEL
    text, _, prompt = await run(tiered, long_request("rivers", 300, 16))
    assert text and prompt > CONTEXT // PARALLEL  # more than a stream holds
    assert shared.is_open and shared.context.shared  # allocated for it
    assert max(cached(tiered, 1)) >= prompt
    with pytest.raises(ContextOverflow):  # the shared half is the bound
        tiered.prepare(long_request("rivers", 300, CONTEXT), 64)


async def test_a_conversation_that_outgrows_its_stream_keeps_its_cache(
        tiered: LlamaCppEngine) -> None:
    """Turn 1 fits a split stream; turn 2 (turn 1, its answer, a longer question) does not:
    it runs in the shared tier, its earlier turns' cells moved from the stream rather than
    decoded again, with the same answer, token for token and logprob for logprob, as the
    same request with nothing cached."""
    tiered.forget_cache()
    question = "Tell me about the moon in a few sentences."
    answer, _, first = await run(tiered, turns(question, max_tokens=60))
    assert first + 60 <= CONTEXT // PARALLEL
    follow = turns(question, answer, "Now say more about its phases and its tides. " * 8,
                   max_tokens=120)
    moved = tiered._tiers[1].slots.moved_tokens
    reused = tiered.reused_prefix_tokens
    prepared = tiered.prepare(follow, 64)
    assert len(prepared.prompt_ids) + 120 > CONTEXT // PARALLEL
    usage = None
    text, logprobs = "", []
    async for event in tiered.stream(prepared):
        if isinstance(event, EngineText):
            text += event.text
            logprobs.extend(lp.logprob for lp in event.logprobs)
        elif isinstance(event, EngineFinish):
            usage = event.usage
    assert usage is not None and usage.cached_tokens >= first - 1  # turn 1's prompt at least
    assert tiered._tiers[1].slots.moved_tokens - moved == usage.cached_tokens
    assert tiered.reused_prefix_tokens - reused == usage.cached_tokens  # counted once
    tiered.forget_cache()
    cold_text, cold_logprobs, _ = await run(tiered, follow)
    assert (text, logprobs) == (cold_text, cold_logprobs)


async def test_both_tiers_stream_at_once_with_the_answers_they_give_alone(
        tiered: LlamaCppEngine) -> None:
    tiered.forget_cache()
    long = long_request("lanterns", 300, 24, logprobs=True)
    # answers long enough to be decoding while the long prompt's prefill goes on beside
    # them in paced chunks (pace.py: the shortest prompt first, a step kept short)
    shorts = [turns(f"Write a long paragraph about {w}.", max_tokens=80)
              for w in ("owls", "snow")]
    alone = [await run(tiered, r) for r in (long, *shorts)]
    tiered.forget_cache()
    log: list[str] = []
    together = await asyncio.gather(run(tiered, long, log, "long"),
                                    *(run(tiered, r, log, f"s{i}") for i, r in enumerate(shorts)))
    assert log.index("long first") < log.index("s0 end")  # they overlapped
    assert [(t, lp) for t, lp, _ in together] == [(t, lp) for t, lp, _ in alone]


async def test_the_shared_tier_is_allocated_on_demand_and_freed_when_idle() -> None:
    """Its cells exist only while a conversation longer than a stream needs them (and for
    --shared-tier-keep-alive after): the load opens, checks and frees it; the conversation
    that outgrows its stream opens it (its prefill reported from 0), moves its turns over
    and answers as the same request does cold, after the tier was freed and opened again."""
    options = EngineOptions(context_size=2 * CONTEXT, parallel=PARALLEL, threads=THREADS)
    eng = LlamaCppEngine(options.with_values(shared_tier_keep_alive=1.0))
    await eng.load()
    try:
        shared = eng._tiers[1]
        assert shared.lazy and not shared.is_open and eng.info.context_tokens == CONTEXT
        question = "Tell me about the moon in a few sentences."
        answer, _, _ = await run(eng, turns(question, max_tokens=60))
        assert not shared.is_open  # it fitted a stream
        follow = turns(question, answer, "Now say more about its phases and its tides. " * 45,
                       max_tokens=120)
        prepared = eng.prepare(follow, 64)
        assert len(prepared.prompt_ids) > 512  # long enough to report its prefill
        events = [e async for e in eng.stream(prepared)]
        progress = [(e.done, e.total) for e in events if isinstance(e, EngineProgress)]
        assert progress[0] == (0, len(prepared.prompt_ids))  # the opening, then the prefill
        finish = events[-1]
        assert isinstance(finish, EngineFinish) and finish.usage.cached_tokens > 0  # moved
        warm = ("".join(e.text for e in events if isinstance(e, EngineText)),
                [lp.logprob for e in events if isinstance(e, EngineText) for lp in e.logprobs])
        for _ in range(100):  # freed after 1 s unused
            if not shared.is_open:
                break
            await asyncio.sleep(0.05)
        assert not shared.is_open
        eng.forget_cache()
        cold_text, cold_logprobs, _ = await run(eng, follow)
        assert shared.is_open and (cold_text, cold_logprobs) == warm
    finally:
        await eng.aclose()


def test_a_split_streams_saved_cells_become_one_streams() -> None:
    """migrate.one_stream on llama.cpp's saved form: magic and sequence id, the stream count,
    a cell count a stream (zero: nothing more), the cells of the sequence's own stream."""
    head = bytes.fromhex("d83c14af") + (2).to_bytes(4, "little")
    zero = bytes(4)
    cells = (3).to_bytes(4, "little") + b"cells..." + bytes(8)  # may end in zero bytes
    saved = head + (4).to_bytes(4, "little") + zero + zero + cells + zero
    assert one_stream(saved, 4) == head + (1).to_bytes(4, "little") + cells
    assert one_stream(saved, 8) is None  # another stream count
    assert one_stream(head + (4).to_bytes(4, "little") + zero * 4, 4) is None  # no cells
    elsewhere = head + (4).to_bytes(4, "little") + zero + cells + zero + zero
    assert one_stream(elsewhere, 4) is None  # not in the sequence's own stream (2)
    assert one_stream(saved[:10], 4) is None
