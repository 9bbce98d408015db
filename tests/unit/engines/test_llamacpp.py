"""What is specific to the llama.cpp engine: continuous batching and prompt-prefix reuse
must not change what a request answers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

from tests.conftest import THREADS
from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.llamacpp import LlamaCppEngine
from tokenpipe.types import EngineText, GenerationRequest, Message, SamplingParams

pytestmark = pytest.mark.model

SYSTEM = ("You are a careful assistant. Answer in one short paragraph, plainly, without "
          "lists, and never mention that you are an AI. Keep every answer under fifty words.")


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine(EngineOptions(context_size=4096, parallel=4, threads=THREADS))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


def ask(question: str, max_tokens: int = 24) -> GenerationRequest:
    return GenerationRequest(
        messages=(Message("system", SYSTEM), Message("user", question)),
        params=SamplingParams(max_tokens=max_tokens))


async def answer(engine: LlamaCppEngine, request: GenerationRequest) -> str:
    prepared = engine.prepare(request, 64)
    return "".join([e.text async for e in engine.stream(prepared) if isinstance(e, EngineText)])


async def test_shared_system_prompt_is_decoded_once_and_answers_do_not_change(
    engine: LlamaCppEngine,
) -> None:
    questions = ["What is rain?", "Why is the sky blue?", "What is a river?",
                 "How do birds fly?"]
    alone = [await answer(engine, ask(q)) for q in questions]
    engine.forget_cache()  # the next four start cold, all at once
    together = await asyncio.gather(*(answer(engine, ask(q)) for q in questions))
    assert together == alone
    assert engine.shared_prefix_tokens > 0  # the later three copied the system prompt


async def test_repeated_prompt_reuses_the_slot_cache(engine: LlamaCppEngine) -> None:
    request = ask("Name a color.", max_tokens=8)
    first = await answer(engine, request)
    reused_before = engine.reused_prefix_tokens
    second = await answer(engine, request)
    assert first == second
    prompt_tokens = engine.prepare(request, 8).prompt_tokens
    assert engine.reused_prefix_tokens - reused_before >= prompt_tokens - 1


def test_decode_steps_times_every_batch_size_at_the_same_positions() -> None:
    from tokenpipe.engines.llamacpp import LlamaCppEngine

    times = LlamaCppEngine.time_decode_steps(EngineOptions(threads=THREADS, parallel=4), [1, 2, 4],
                                             rounds=2, steps=3, prompt_tokens=16)
    assert sorted(times) == [1, 2, 4]
    assert all(len(v) == 6 and min(v) > 0 for v in times.values())


def test_decode_steps_refuses_what_the_context_cannot_hold() -> None:
    from tokenpipe.engines.llamacpp import LlamaCppEngine
    from tokenpipe.errors import EngineError

    with pytest.raises(EngineError, match="raise context_size"):
        LlamaCppEngine.time_decode_steps(
            EngineOptions(threads=THREADS, parallel=8, context_size=512), [1, 8], steps=100,
            prompt_tokens=200)


def test_bench_decode_steps_prints_a_line_per_batch_size() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "tokenpipe", "bench", "--decode-steps", "-n", "3",
         "--rounds", "1", "--threads", str(THREADS)],
        capture_output=True, text=True, timeout=120, check=True).stdout
    lines = [line.split() for line in out.splitlines() if line.strip().startswith("k=")]
    assert [line[0] for line in lines] == ["k=1", "k=2", "k=3"]
    assert all(float(line[1]) > 0 and line[-4].endswith("x") for line in lines)
    assert lines[0][-4] == "1.00x"


def test_bench_decode_steps_names_a_missing_model_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    missing = tmp_path / "none.gguf"
    done = subprocess.run(
        [sys.executable, "-m", "tokenpipe", "bench", "--decode-steps", "--model-path",
         str(missing)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == f"tokenpipe bench: model file not found: {missing}"


async def test_an_answer_going_on_from_ids_inside_a_character_completes_it(
        engine: LlamaCppEngine) -> None:
    """A take-over goes on from the answer's token ids (server/state/follower.py). A token
    may end inside a character whose text was not sent yet: the continuation's first text
    completes that character (no U+FFFD), and the whole is the uninterrupted answer."""
    from tokenpipe.engines.prefill import from_ids
    from tokenpipe.text import Utf8Decoder

    request = GenerationRequest(
        messages=(Message("user", "Repeat exactly: こんにちは、世界。🎉 ありがとう。"),),
        params=SamplingParams(max_tokens=40, temperature=0))
    prepared = engine.prepare(request, 40)
    events = [e async for e in engine.stream(prepared) if isinstance(e, EngineText)]
    whole = "".join(e.text for e in events)
    ids = [i for e in events for i in e.token_ids]
    pieces = [engine._vocab.piece(i) for i in ids]
    inside = [k for k in range(1, len(ids))
              if Utf8Decoder().feed(b"".join(pieces[:k])) != b"".join(pieces[:k]).decode(
                  "utf-8", "replace")]
    assert inside, (whole, ids)  # the answer has a character split between tokens
    for k in inside[:3]:
        sent = Utf8Decoder().feed(b"".join(pieces[:k]))
        going_on = from_ids(request, tuple(prepared.prompt_ids), tuple(ids[:k]), 40 - k)
        assert going_on is not None
        rest = "".join([e.text async for e in engine.stream(engine.prepare(going_on, 40 - k))
                        if isinstance(e, EngineText)])
        assert "\ufffd" not in rest and sent + rest == whole, (k, sent, rest, whole)
