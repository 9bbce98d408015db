"""The resume store (server/resumable.py) through its interface, ResumeStore: every
implementation passes these (STYLE.md item 10; the in-process one today). Sessions are
written to by hand as the scheduler would; readers are fakes that note being moved."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tokenpipe.engines.base import PreparedRequest
from tokenpipe.server.resumable import Held, LocalResumeStore, ResumeStore
from tokenpipe.session import Delta, Finished, GenerationSession
from tokenpipe.types import FinishReason, GenerationRequest

GRACE_S = 0.05
STORES: dict[str, Callable[[float], ResumeStore]] = {"local": LocalResumeStore}


@pytest.fixture(params=list(STORES))
def store(request: pytest.FixtureRequest) -> ResumeStore:
    return STORES[request.param](GRACE_S)


class Reader:
    """A connection reading a stream: it notes each time a resume takes it over."""

    def __init__(self) -> None:
        self.moves: list[str | None] = []

    def moved(self, session: GenerationSession, new_id: str | None = None) -> None:
        self.moves.append(new_id)


def kept(store: ResumeStore, texts: str = "ab") -> GenerationSession:
    """A resumable session in the store, started, with one delta per text sealed."""
    s = GenerationSession(PreparedRequest(GenerationRequest(prompt="x"), "x", [1], 8), "m",
                          resumable=True)
    s.bind_cancel(lambda: s.finish(FinishReason.CANCELLED))
    store.keep(Held(s, "first"))
    s.mark_started(1)
    sealer = s.cursor()
    for text in texts:
        s.add_text(text, 1)
        sealer.poll(merge=False)
    sealer.close()
    return s


def token(s: GenerationSession) -> str:
    assert s.stream_token is not None
    return s.stream_token


def deltas(events: list[object]) -> list[Delta]:
    return [e for e in events if isinstance(e, Delta)]


async def test_a_take_over_reads_after_a_seq_and_moves_the_previous_reader(
        store: ResumeStore) -> None:
    s = kept(store, "abc")
    one, two = Reader(), Reader()
    told: list[str] = []
    first = store.take_over(token(s), -1, one, on_news=lambda: told.append("one"))
    assert [d.text for d in deltas(first.poll())] == ["a", "b", "c"]
    second = store.take_over(token(s), 1, two,  # the client saw seq 0 and 1
                             on_news=lambda: told.append("two"))
    assert one.moves == [None] and two.moves == []
    assert deltas(second.poll()) == [Delta(2, "c")]
    s.add_text("d", 1)
    assert told == ["two"]  # the previous reader's cursor is closed: told nothing more
    assert deltas(second.poll()) == [Delta(3, "d")]
    held = store.get(token(s))
    assert held is not None and held.reader is two and held.cursor is second


async def test_the_same_reader_under_a_new_id_is_told_that_id(store: ResumeStore) -> None:
    s = kept(store)
    reader = Reader()
    store.take_over(token(s), -1, reader)
    store.take_over(token(s), 0, reader, stream_id="again")
    held = store.get(token(s))
    assert reader.moves == ["again"] and held is not None and held.stream_id == "again"


async def test_followers_read_beside_the_reader_and_move_nobody(store: ResumeStore) -> None:
    s = kept(store)
    reader = Reader()
    mine = store.take_over(token(s), -1, reader)
    followers = [store.take_over(token(s), after, None) for after in (-1, 0)]
    s.add_text("c", 1)
    s.finish(FinishReason.STOP)
    assert reader.moves == []
    assert [d.text for d in deltas(mine.poll())] == ["a", "b", "c"]
    assert [d.text for d in deltas(followers[0].poll())] == ["a", "b", "c"]
    tail = followers[1].poll()
    assert [d.text for d in deltas(tail)] == ["b", "c"] and isinstance(tail[-1], Finished)


async def test_a_refused_take_over_changes_nothing(store: ResumeStore) -> None:
    s = kept(store)
    reader = Reader()
    cursor = store.take_over(token(s), -1, reader)
    with pytest.raises(KeyError):
        store.take_over("no-such-token", -1, Reader())
    with pytest.raises(ValueError, match="beyond"):
        store.take_over(token(s), 5, Reader())  # seq 5 was never sent
    held = store.get(token(s))
    assert held is not None and held.reader is reader and held.cursor is cursor
    assert reader.moves == []


async def test_an_orphan_is_kept_for_the_grace_period_then_cancelled(
        store: ResumeStore) -> None:
    s = kept(store)
    store.take_over(token(s), -1, Reader())
    store.orphan(s)
    held = store.get(token(s))
    assert held is not None and held.reader is None and held.cursor is None
    await asyncio.sleep(GRACE_S * 3)
    assert store.get(token(s)) is None and len(store) == 0
    assert isinstance(s.final, Finished) and s.final.reason is FinishReason.CANCELLED


async def test_a_take_over_in_the_grace_period_keeps_the_stream(store: ResumeStore) -> None:
    s = kept(store)
    store.take_over(token(s), -1, Reader())
    store.orphan(s)
    back = store.take_over(token(s), 1, Reader())  # the client came back in time
    await asyncio.sleep(GRACE_S * 3)
    assert store.get(token(s)) is not None and s.final is None
    s.add_text("c", 1)
    assert deltas(back.poll()) == [Delta(2, "c")]


async def test_a_follower_does_not_end_the_grace_period(store: ResumeStore) -> None:
    s = kept(store)
    s.finish(FinishReason.STOP)
    store.orphan(s)  # read to the end (a background response, stored)
    late = store.take_over(token(s), -1, None)
    await asyncio.sleep(GRACE_S * 3)
    assert store.get(token(s)) is None
    assert [d.text for d in deltas(late.poll())] == ["a", "b"]  # it reads on regardless


async def test_close_cancels_and_forgets_every_stream(store: ResumeStore) -> None:
    sessions = [kept(store), kept(store)]
    store.orphan(sessions[0])
    store.close()
    assert len(store) == 0
    assert all(isinstance(s.final, Finished) and s.final.reason is FinishReason.CANCELLED
               for s in sessions)
    await asyncio.sleep(GRACE_S * 2)  # no grace timer is left to fire
