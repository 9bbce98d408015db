"""The same request gives the same answer (issue 14): greedy and seeded output of the llama.cpp
engine, on the real bundled model, is a function of the request alone: cold or warm prompt
cache, its system prompt copied from a running request or from a slot's cache, alone or
among 7 other requests, one token per llama_decode or batched.

The system prompt is long (over 400 tokens, so the KV cache passes 512 cells while the answer
is written): with llama.cpp's default kernels these cases gave five different answers to
the same greedy request on this machine (docs/determinism.md)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

from tests.conftest import THREADS
from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.llamacpp import LlamaCppEngine
from tokenpipe.errors import EngineError
from tokenpipe.types import EngineText, GenerationRequest, Message, SamplingParams

pytestmark = pytest.mark.model

TOPICS = ["rivers", "mountains", "trains", "gardens", "libraries", "markets", "bridges",
          "harbors", "forests"]
SYSTEM = "You are a travel guide for a small town. " + " ".join(
    f"Rule {i + 1}: when a visitor asks about {t}, describe the {t} of the town in two "
    f"friendly sentences, mention one fact about their history, and suggest a good time of "
    f"day to visit them." for i, t in enumerate(TOPICS))
QUESTION = "「どこですか」を英語で説明して"
OTHERS = ["Write a haiku about rain.", "What is a river?", "Why is the sky blue?",
          "Name three colors.", "How do birds fly?", "Explain gravity to a child.",
          "Give me a recipe for tea."]
TOKENS = 40  # with llama.cpp's default kernels the answers parted within 12 tokens


def ask(question: str, **params: object) -> GenerationRequest:
    return GenerationRequest(
        messages=(Message("system", SYSTEM), Message("user", question)),
        params=SamplingParams(max_tokens=TOKENS, **params))  # type: ignore[arg-type]


GREEDY = ask(QUESTION)
SEEDED = ask("Tell me about the town's bridges.", temperature=0.8, top_p=0.95, seed=7)


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    # split: the strict promise (the shared pool's cell order moves with its history:
    # docs/determinism.md, "The KV cache's layout")
    options = EngineOptions(context_size=8192, parallel=8, threads=THREADS)
    eng = LlamaCppEngine(options.with_values(kv_cache="split"))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


async def answer(engine: LlamaCppEngine, request: GenerationRequest) -> str:
    prepared = engine.prepare(request, TOKENS)
    return "".join([e.text async for e in engine.stream(prepared) if isinstance(e, EngineText)])


def common_prefix(a: GenerationRequest, b: GenerationRequest, engine: LlamaCppEngine) -> int:
    x, y = (engine.prepare(r, 1).prompt_ids for r in (a, b))
    return next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q),
                min(len(x), len(y)))


def test_the_bundled_model_passes_the_load_time_check(engine: LlamaCppEngine) -> None:
    assert engine.determinism == "exact"
    assert engine.rows_exact is True


async def test_greedy_and_seeded_answers_do_not_depend_on_cache_sharing_or_batch(
    engine: LlamaCppEngine,
) -> None:
    assert engine.prepare(GREEDY, TOKENS).prompt_tokens > 400
    greedy: dict[str, str] = {}
    seeded: dict[str, str] = {}
    engine.forget_cache()
    greedy["cold"] = await answer(engine, GREEDY)
    reused = engine.reused_prefix_tokens
    greedy["warm"] = await answer(engine, GREEDY)  # the last prompt token decoded alone
    assert engine.reused_prefix_tokens - reused == engine.prepare(GREEDY, 1).prompt_tokens - 1
    reused = engine.reused_prefix_tokens
    seeded["system prompt from a slot"] = await answer(engine, SEEDED)  # GREEDY's slot
    assert engine.reused_prefix_tokens - reused == common_prefix(GREEDY, SEEDED, engine)
    reused = engine.reused_prefix_tokens
    seeded["warm"] = await answer(engine, SEEDED)
    assert engine.reused_prefix_tokens - reused == engine.prepare(SEEDED, 1).prompt_tokens - 1

    # All at once from cold: the first to arrive decodes the system prompt, the other seven
    # copy it from that running sequence; GREEDY and SEEDED decode among seven others.
    engine.forget_cache()
    shared = engine.shared_prefix_tokens
    hello = ask("Hello!")
    requests = [hello, *(ask(q) for q in OTHERS[:5]), SEEDED, GREEDY]
    texts = await asyncio.gather(*(answer(engine, r) for r in requests))
    greedy["shared prefix, among 7"], seeded["shared prefix, among 7"] = texts[-1], texts[-2]
    assert engine.shared_prefix_tokens - shared >= 7 * common_prefix(hello, GREEDY, engine)

    assert greedy["cold"] and seeded["warm"]
    assert {k: v for k, v in greedy.items() if v != greedy["cold"]} == {}, greedy["cold"]
    assert {k: v for k, v in seeded.items() if v != seeded["warm"]} == {}, seeded["warm"]


async def test_one_token_per_decode_gives_the_batched_answer(engine: LlamaCppEngine) -> None:
    """serial decodes each token alone (every matmul sees one row); exact batches them."""
    request = GenerationRequest(messages=(Message("user", QUESTION),),
                                params=SamplingParams(max_tokens=TOKENS))
    batched = await answer(engine, request)
    options = EngineOptions(context_size=2048, parallel=2, threads=THREADS)
    serial = LlamaCppEngine(options.with_values(determinism="serial", kv_cache="split"))
    await serial.load()
    try:
        assert await answer(serial, request) == batched
    finally:
        await serial.aclose()


def test_an_unknown_determinism_is_refused_before_loading() -> None:
    with pytest.raises(EngineError, match="exact, serial, fast"):
        LlamaCppEngine(EngineOptions().with_values(determinism="sometimes"))
