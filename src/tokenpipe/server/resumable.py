"""Resumable streams: one store for every door that resumes (tokenpipe.v1 `resume`,
`GET /v1/streams/TOKEN`, background Responses `retrieve(stream=True)`), so a token from
one resumes over another. A stream is kept by its token while it is read, and for a grace
period after its reader went away (or read it to the end); nobody resuming it by then, it
is cancelled and forgotten.

`ResumeStore` is the interface the doors use; `LocalResumeStore` keeps the streams in this
process; `RedisResumeStore` (server/state/redis_store.py, `--state redis://...`) also
logs them in Redis, where `find` on any replica replays them into a local session."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..session import Cursor, GenerationSession


class Reader(Protocol):
    """Who reads a held stream for its client now (a /ws connection, an SSE response)."""

    def moved(self, session: GenerationSession, new_id: str | None = None) -> None:
        """A resume elsewhere (or under `new_id` on the same /ws connection) took it over."""


@dataclass
class Held:
    """A resumable session and who reads it now: the store's record, not the session's."""

    session: GenerationSession
    stream_id: str  # the id its reader calls it by (a resume without one keeps it)
    reader: Reader | None = None  # the one reader a take-over moves
    cursor: Cursor | None = None  # that reader's cursor
    # how a door renders it, so every resume renders alike (the SSE door's chunk id,
    # created, model, usage chunk): set by the request that started it or the first resume;
    # plain data, so that a shared store can keep it as well
    sse: object = None


class ResumeStore(Protocol):
    """The resumable streams every door shares, by stream token."""

    def keep(self, held: Held) -> None:
        """A new resumable stream (its session's stream_token is the key)."""

    def get(self, token: str) -> Held | None:
        """The record of a stream kept here; None: unknown, or its grace period ended."""

    async def find(self, token: str, after: int = -1) -> Held | None:
        """The record of a kept stream, wherever it was produced (a shared store replays
        another replica's stream here, up to seq `after` where the log has it by then);
        None: unknown, or its grace period ended."""

    def take_over(self, token: str, after: int, reader: Reader | None, *,
                  stream_id: str | None = None, on_news: Callable[[], None] | None = None,
                  progress: bool = False) -> Cursor:
        """A cursor on the stream from the delta after seq `after`. With a `reader` it is
        the stream's reader from now on: the previous one is told `moved` (with
        `stream_id` when it is the same reader) and its cursor closed, and a grace period
        ends; without, it is one more follower (a background response's stream). Checked
        before anything changes hands: KeyError for an unknown token, ValueError for an
        `after` that cannot be read (Session.check_after)."""
        ...

    def orphan(self, session: GenerationSession) -> None:
        """Its reader went away, or read it to the end: kept for the grace period."""

    def hands_over(self, session: GenerationSession) -> bool:
        """Whether the session's end is not its stream's end: this server shuts down and
        another replica goes on with it where its client resumes (a shared store). A door
        then sends no final event: its client resumes elsewhere."""

    def drain(self) -> None:
        """Shutdown begins: streams whose generation runs elsewhere let their readers go
        (a shared store); the rest run on for the shutdown grace."""

    def close(self) -> None:
        """Shutdown: every stream cancelled and forgotten."""

    async def aclose(self) -> None:
        """close(), then whatever connection the store holds."""

    def __len__(self) -> int: ...


class LocalResumeStore:
    """The streams of this process, in memory (ResumeStore)."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._held: dict[str, Held] = {}
        self._grace: dict[str, asyncio.TimerHandle] = {}

    def keep(self, held: Held) -> None:
        assert held.session.stream_token is not None
        self._held[held.session.stream_token] = held

    def get(self, token: str) -> Held | None:
        return self._held.get(token)

    async def find(self, token: str, after: int = -1) -> Held | None:
        return self._held.get(token)

    def take_over(self, token: str, after: int, reader: Reader | None, *,
                  stream_id: str | None = None, on_news: Callable[[], None] | None = None,
                  progress: bool = False) -> Cursor:
        held = self._held[token]
        session = held.session
        session.check_after(after)
        cursor = session.cursor(after, on_news, progress=progress)
        if reader is None:
            return cursor
        self._cancel_grace(token)
        previous, old = held.reader, held.cursor
        held.reader, held.cursor = reader, cursor
        if stream_id is not None:
            held.stream_id = stream_id
        if old is not None:
            old.close()
        if previous is not None:
            previous.moved(session, stream_id if previous is reader else None)
        return cursor

    def orphan(self, session: GenerationSession) -> None:
        token = session.stream_token
        held = self._held.get(token) if token is not None else None
        if token is None or held is None:
            return
        if held.cursor is not None:
            held.cursor.close()
        held.reader = held.cursor = None
        self._cancel_grace(token)
        loop = asyncio.get_running_loop()
        self._grace[token] = loop.call_later(self.grace_s, self._expire, token)

    def hands_over(self, session: GenerationSession) -> bool:
        return False

    def drain(self) -> None:
        return None

    def close(self) -> None:
        for handle in self._grace.values():
            handle.cancel()
        self._grace.clear()
        for held in self._held.values():
            with contextlib.suppress(Exception):
                held.session.cancel()
        self._held.clear()

    async def aclose(self) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._held)

    def _cancel_grace(self, token: str) -> None:
        handle = self._grace.pop(token, None)
        if handle is not None:
            handle.cancel()

    def _expire(self, token: str) -> None:
        self._grace.pop(token, None)
        held = self._held.pop(token, None)
        if held is not None:
            held.session.cancel()
