"""GenerationSession and its Cursor alone, written to by hand as the scheduler would: the
states, merging for a reader that fell behind, seq across a handover, wake, cancel."""

from __future__ import annotations

import asyncio

import pytest

from tokenpipe.engines.base import PreparedRequest
from tokenpipe.session import (
    Delta,
    Finished,
    GenerationSession,
    Progress,
    Queued,
    Started,
    State,
)
from tokenpipe.types import FinishReason, GenerationRequest


def session(resumable: bool = False) -> GenerationSession:
    request = GenerationRequest(prompt="x")
    return GenerationSession(PreparedRequest(request, "x", [1], 8), "m", resumable=resumable)


def test_states_and_events_in_order() -> None:
    s = session()
    cursor = s.cursor()
    s.set_position(2)
    assert s.state is State.QUEUED and cursor.poll() == [Queued(2)]
    s.set_position(1)
    assert cursor.poll() == [Queued(1)]
    s.mark_started(1)
    s.add_text("a", 1)
    events = cursor.poll(merge=False)
    assert events[0] == Started("m", 1, None) and events[1:] == [Delta(0, "a")]
    s.finish(FinishReason.STOP)
    final = cursor.poll()
    assert s.state is State.DONE and isinstance(final[-1], Finished)
    assert final[-1].usage.completion_tokens == 1
    assert cursor.finished and cursor.poll() == []


def test_prefill_progress_goes_to_readers_that_ask_latest_first_and_before_text() -> None:
    s = session()
    plain = s.cursor()  # a door that says nothing of progress (Ollama, plain mode)
    s.mark_started(1500)
    s.set_progress(0, 1500)  # begun (transformers says so before its one forward)
    assert plain.poll() == [Started("m", 1500, None)]
    s.set_progress(512, 1500)
    assert plain.poll() == []
    told = s.cursor(progress=True)  # the session's reader from now on
    s.set_progress(1024, 1500)  # 0 and 512 were not read by it: only the latest goes
    assert told.poll() == [Started("m", 1500, None), Progress(1024, 1500)]
    assert told.poll() == []  # nothing new: not sent again
    s.set_progress(1500, 1500)
    s.add_text("a", 1)  # the last chunk's progress and the first token come together
    assert told.poll(merge=False) == [Progress(1500, 1500), Delta(0, "a")]
    fresh = session()
    first = fresh.cursor(progress=True)
    fresh.mark_started(900)
    fresh.set_progress(0, 900)  # the prefill began: news too
    assert first.poll() == [Started("m", 900, None), Progress(0, 900)]


def test_a_reader_that_fell_behind_gets_one_merged_delta() -> None:
    s = session()
    cursor = s.cursor()
    s.mark_started(1)
    for piece in ("a", "b", "c"):
        s.add_text(piece, 1)
    assert cursor.poll(merge=False)[1:] == [Delta(0, "a"), Delta(1, "b"), Delta(2, "c")]
    for piece in ("d", "e"):
        s.add_text(piece, 1)
    assert cursor.poll() == [Delta(3, "de")]  # seq stays contiguous


async def test_next_waits_for_news_and_wake_returns_nothing() -> None:
    s = session()
    cursor = s.cursor()
    s.mark_started(1)
    assert isinstance((await cursor.next())[0], Started)
    waiting = asyncio.ensure_future(cursor.next())
    await asyncio.sleep(0)
    assert not waiting.done()
    s.add_text("hi", 1)
    assert await asyncio.wait_for(waiting, 1) == [Delta(0, "hi")]
    cursor.wake()
    assert await cursor.next() == []


async def test_iteration_ends_with_the_final_event() -> None:
    s = session()
    cursor = s.cursor()

    async def engine() -> None:
        s.mark_started(1)
        for piece in "abc":
            await asyncio.sleep(0)
            s.add_text(piece, 1)
        s.finish(FinishReason.LENGTH)

    task = asyncio.ensure_future(engine())
    events = [e async for e in cursor]
    await task
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "abc"
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.LENGTH


def test_several_readers_of_a_resumable_session_each_replay_from_their_seq() -> None:
    s = session(resumable=True)
    told: list[str] = []
    old = s.cursor(on_news=lambda: told.append("old"))
    s.mark_started(1)
    s.add_text("a", 1)
    s.add_text("b", 1)
    old.poll(merge=False)
    new = s.cursor(0, on_news=lambda: told.append("new"))
    s.add_text("c", 1)
    assert told[-2:] == ["old", "new"]  # both are told of news
    assert [e for e in new.poll(merge=False) if isinstance(e, Delta)] == [Delta(1, "b"),
                                                                          Delta(2, "c")]
    assert [e for e in old.poll(merge=False) if isinstance(e, Delta)] == [Delta(2, "c")]
    old.close()
    told.clear()
    s.add_text("d", 1)
    assert told == ["new"]  # a closed reader hears nothing more


def test_a_reader_cannot_start_after_what_was_never_sent_or_is_gone() -> None:
    s = session()
    cursor = s.cursor()
    s.mark_started(1)
    s.add_text("a", 1)
    with pytest.raises(ValueError, match="beyond"):
        s.check_after(0)  # seq 0 is sealed only when a reader takes it
    cursor.poll()
    s.add_text("b", 1)
    cursor.poll()
    with pytest.raises(ValueError, match="no longer kept"):
        s.cursor(-1)  # not resumable: what was read is let go


def test_cancel_goes_through_the_bound_canceller_until_the_end() -> None:
    s = session()
    calls: list[int] = []
    s.bind_cancel(lambda: calls.append(1))
    s.cancel()
    s.finish(FinishReason.CANCELLED)
    s.cancel()  # ended: nothing more to stop
    assert calls == [1] and s.done.is_set()


def test_token_ids_go_with_the_text_they_made() -> None:
    """Ids of tokens whose text has not come (part of a character, text a stop string
    holds) go with the next text; a reader that fell behind gets them merged, in order;
    ids whose text never comes are on no delta."""
    s = session(resumable=True)
    s.mark_started(1)
    s.add_text("a", 1, (10,))
    s.add_text("", 1, (11,))  # the first half of a character
    s.add_text("é", 1, (12,))
    one = [e for e in s.cursor().poll(merge=False) if isinstance(e, Delta)]
    assert [(d.text, d.token_ids) for d in one] == [("a", (10,)), ("é", (11, 12))]
    s.add_text("b", 1, (13,))
    s.add_text("c", 1)  # an engine that gives no ids
    s.add_text("", 1, (14,))
    s.finish(FinishReason.STOP)
    merged = [e for e in s.cursor(1).poll() if isinstance(e, Delta)]
    assert [(d.text, d.token_ids) for d in merged] == [("bc", (13,))]
