"""The scheduler and sessions on the fake engine, in-process: admission, queue positions,
overload, cancellation, failures, and the merging of deltas for a slow reader."""

from __future__ import annotations

import asyncio

import pytest

from tokenpipe.engines.base import EngineOptions, PreparedRequest
from tokenpipe.engines.fake import SCRIPT, FakeEngine
from tokenpipe.errors import ContextOverflow, Overloaded
from tokenpipe.scheduler import Scheduler
from tokenpipe.session import Delta, Failed, Finished, Queued, Started
from tokenpipe.types import FinishReason, GenerationRequest, Message, SamplingParams


def req(text: str = "hi", **params: object) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),),
                             params=SamplingParams(**params))  # type: ignore[arg-type]


def scheduler(max_running: int = 1, max_queue: int = 4) -> Scheduler:
    engine = FakeEngine.from_options(EngineOptions(context_size=4096))
    return Scheduler(engine, max_running=max_running, max_queue=max_queue)


async def test_queue_positions_count_down_in_order() -> None:
    s = scheduler(max_running=1)
    first = s.submit(req("[[pace_ms=5]]", max_tokens=10))
    waiting = [s.submit(req("[[tokens=3]]")) for _ in range(3)]
    await asyncio.sleep(0)
    assert [w.position for w in waiting] == [1, 2, 3]
    last = [e async for e in waiting[2].events()]
    positions = [e.position for e in last if isinstance(e, Queued)]
    assert positions[0] == 3 and positions[-1] == 1
    assert positions == sorted(positions, reverse=True)
    assert isinstance(last[-1], Finished)
    assert first.done.is_set()


async def test_full_queue_is_overloaded_with_retry_after() -> None:
    s = scheduler(max_running=1, max_queue=2)
    keep = [s.submit(req("[[pace_ms=20]]")) for _ in range(3)]
    with pytest.raises(Overloaded) as info:
        s.submit(req())
    assert info.value.retry_after_ms
    for session in keep:
        session.cancel()


async def test_cancel_while_queued_frees_the_place_at_once() -> None:
    s = scheduler(max_running=1)
    running = s.submit(req("[[pace_ms=10]]", max_tokens=50))
    queued = s.submit(req())
    behind = s.submit(req("[[tokens=2]]"))
    await asyncio.sleep(0)
    assert behind.position == 2
    queued.cancel()
    await asyncio.sleep(0)
    assert behind.position == 1
    events = [e async for e in queued.events()]
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.CANCELLED
    assert not any(isinstance(e, Started) for e in events)
    running.cancel()
    assert isinstance([e async for e in behind.events()][-1], Finished)
    assert s.running == 0 and s.queued == 0


async def test_cancel_while_running_releases_the_slot() -> None:
    s = scheduler(max_running=1)
    running = s.submit(req("[[pace_ms=10]]", max_tokens=200))
    async for event in running.events():
        if isinstance(event, Delta):
            running.cancel()
    assert running.final is not None and isinstance(running.final, Finished)
    assert running.final.reason is FinishReason.CANCELLED
    assert running.final.usage.completion_tokens < 10
    assert s.running == 0


async def test_engine_fault_fails_only_that_session() -> None:
    s = scheduler(max_running=2)
    bad = s.submit(req("[[fail_after=2]]"))
    good = s.submit(req())
    bad_events = [e async for e in bad.events()]
    good_events = [e async for e in good.events()]
    assert isinstance(bad_events[-1], Failed) and bad_events[-1].error.code == "engine_error"
    assert "".join(e.text for e in good_events if isinstance(e, Delta)) == SCRIPT


async def test_context_overflow_is_raised_before_anything_runs() -> None:
    s = scheduler()
    with pytest.raises(ContextOverflow):
        s.submit(GenerationRequest(prompt="x" * 20000))
    assert s.running == 0


async def test_slow_reader_gets_merged_deltas_with_contiguous_seq() -> None:
    s = scheduler()
    session = s.submit(req())
    await session.done.wait()  # the reader was away for the whole answer
    events = [e async for e in session.events()]
    deltas = [e for e in events if isinstance(e, Delta)]
    assert len(deltas) == 1 and deltas[0].seq == 0
    assert deltas[0].text == SCRIPT


async def test_resumable_session_replays_after_any_seq() -> None:
    s = scheduler()
    session = s.submit(req(), resumable=True)
    texts: list[str] = []
    async for event in session.events():
        if isinstance(event, Delta):
            texts.append(event.text)
    assert session.stream_token and len(session.stream_token) >= 22
    replay = [e async for e in session.events(after_seq=0)]
    replayed = [e for e in replay if isinstance(e, Delta)]
    assert [d.seq for d in replayed] == list(range(1, len(texts)))
    assert "".join(d.text for d in replayed) == "".join(texts[1:])
    assert isinstance(replay[-1], Finished)


async def test_cancel_right_after_submit_still_ends_and_frees() -> None:
    s = scheduler(max_running=1)
    running = s.submit(req())
    queued = s.submit(req())
    running.cancel()  # before either task has run a single step
    queued.cancel()
    for session in (running, queued):
        events = [e async for e in session.events()]
        assert isinstance(events[-1], Finished)
        assert events[-1].reason is FinishReason.CANCELLED
    assert s.running == 0 and s.queued == 0
    assert [e async for e in s.submit(req("[[tokens=2]]")).events()][-1]


class Recording(FakeEngine):
    """Notes the begin() and forget() calls the scheduler makes."""

    calls: list[tuple[str, str]]

    def begin(self, prepared: PreparedRequest) -> None:
        self.calls.append(("begin", prepared.prompt_text))

    def forget(self, prepared: PreparedRequest) -> None:
        self.calls.append(("forget", prepared.prompt_text))


async def test_begin_only_for_requests_admitted_at_once_and_forget_if_never_streamed(
        ) -> None:
    engine = Recording.from_options(EngineOptions(context_size=4096))
    engine.calls = []
    s = Scheduler(engine, max_running=1, max_queue=4)
    first = s.submit(req("[[pace_ms=5]] one", max_tokens=5))
    queued = s.submit(req("two"))
    assert [c[0] for c in engine.calls] == ["begin"]  # in submit, before any task ran
    assert "one" in engine.calls[0][1]
    await first.done.wait()
    await queued.done.wait()
    assert len(engine.calls) == 1  # queued: admitted later, streamed without begin()
    cancelled = s.submit(req("three"))
    cancelled.cancel()  # before its task ever ran: its stream never starts
    await cancelled.done.wait()
    assert [c[0] for c in engine.calls] == ["begin", "begin", "forget"]
    assert "three" in engine.calls[-1][1] and s.running == 0


class _RecordingEngine(FakeEngine):
    """The fake engine, noting which thread prepared each request."""

    threads: list[str]

    def prepare(self, request: GenerationRequest, default_max_tokens: int) -> PreparedRequest:
        import threading

        self.threads.append(threading.current_thread().name)
        return super().prepare(request, default_max_tokens)


async def test_a_long_prompt_is_tokenized_off_the_event_loop() -> None:
    from tokenpipe.scheduler import INLINE_PROMPT_CHARS

    engine = _RecordingEngine(context_tokens=1 << 20)
    engine.threads = []
    s = Scheduler(engine)
    short = await s.start(req("[[tokens=3]]"))
    long = await s.start(req("[[tokens=3]]" + "x" * (INLINE_PROMPT_CHARS + 1)))
    for session in (short, long):
        assert isinstance([e async for e in session.events()][-1], Finished)
    loop_thread = "MainThread"
    assert engine.threads[0] == loop_thread  # a short prompt: in place, no thread hop
    assert engine.threads[1] != loop_thread  # a long one: in a worker thread
    with pytest.raises(ContextOverflow):  # errors of the worker's prepare reach the caller
        await Scheduler(FakeEngine(context_tokens=64)).start(req("x" * (INLINE_PROMPT_CHARS * 2)))


class _CountingEngine(FakeEngine):
    """The fake engine, noting which thread templated each request it counted."""

    threads: list[str]

    def render(self, request: GenerationRequest) -> str:
        import threading

        self.threads.append(threading.current_thread().name)
        return super().render(request)


@pytest.mark.parametrize("bulk", ["arguments", "tools", "turns"])
async def test_bulk_outside_the_message_text_is_prepared_off_the_event_loop(bulk: str) -> None:
    """The whole request decides, not the messages' text: tool calls' arguments in the
    history, tools' descriptions (count_tokens: with tools, start() compiles a grammar in
    its own pool anyway), thousands of empty turns are templated off the loop."""
    from tokenpipe.scheduler import INLINE_PROMPT_CHARS
    from tokenpipe.types import Message, Tool, ToolCall

    big = "y" * (INLINE_PROMPT_CHARS + 1)
    messages: tuple[Message, ...] = (Message("user", "[[tokens=2]]"),)
    tools: tuple[Tool, ...] = ()
    if bulk == "arguments":
        messages = (Message("user", "hi"),
                    Message("assistant", "", tool_calls=(ToolCall("c1", "f", big),)),
                    Message("tool", "ok", tool_call_id="c1"), Message("user", "[[tokens=2]]"))
    elif bulk == "tools":
        tools = (Tool("f", description=big),)
    else:
        messages = tuple(Message("user", "") for _ in range(INLINE_PROMPT_CHARS // 30)) + messages
    request = GenerationRequest(messages=messages, tools=tools)
    counting = _CountingEngine(context_tokens=1 << 20)
    counting.threads = []
    await Scheduler(counting).count_tokens(request)
    assert counting.threads and "MainThread" not in counting.threads
    if not tools:
        engine = _RecordingEngine(context_tokens=1 << 20)
        engine.threads = []
        (await Scheduler(engine).start(request)).cancel()
        assert len(engine.threads) == 1 and engine.threads[0] != "MainThread"


async def test_the_end_names_the_stop_string_that_ended_the_answer() -> None:
    s = scheduler()
    plain, split = (s.submit(GenerationRequest(
        messages=(Message("user", f"[[echo]]{think}one two STOP three END"),),
        params=SamplingParams(stop=("END", "STOP")), split_reasoning=bool(think)))
        for think in ("", "<think>a</think>"))
    for session in (plain, split):
        end = [e async for e in session.events()][-1]
        assert isinstance(end, Finished) and end.reason is FinishReason.STOP
        assert end.stop_sequence == "STOP"
    free = [e async for e in s.submit(req("[[echo]]one")).events()][-1]
    assert isinstance(free, Finished) and free.stop_sequence is None
