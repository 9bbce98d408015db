"""Resumable streams: kept by their token while a reader has them, and for a grace period
after it went away; nobody resuming them by then, cancelled. One store for every door that
resumes: tokenpipe.v1 `resume` and the Chat Completions SSE `GET /v1/streams/TOKEN`, so a
token from either resumes over the other."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Protocol

from ..session import Cursor, GenerationSession


class Reader(Protocol):
    """Who reads a held session now (a /ws connection, an SSE response)."""

    def moved(self, session: GenerationSession, new_id: str | None = None) -> None:
        """A resume elsewhere (or under `new_id` on the same /ws connection) took it over."""


@dataclass
class Held:
    """A resumable session and who reads it now: the door's own record, not the session's."""

    session: GenerationSession
    stream_id: str  # the id its reader calls it by (a resume without one keeps it)
    reader: Reader | None = None  # the connection reading it now
    cursor: Cursor | None = None
    # how the SSE door renders it (chunk id, created, model, usage chunk): set by the
    # POST that started it, or by the first GET of a v1 token, so every resume renders alike
    sse: Any = None


class ResumableStreams:
    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._held: dict[str, Held] = {}
        self._grace: dict[str, asyncio.TimerHandle] = {}

    def keep(self, held: Held) -> None:
        assert held.session.stream_token is not None
        self._held[held.session.stream_token] = held

    def get(self, token: str) -> Held | None:
        return self._held.get(token)

    def adopt(self, token: str) -> Held | None:
        """A reader takes it over: its grace period, if it was in one, ends."""
        held = self._held.get(token)
        if held is not None:
            self._cancel_grace(token)
        return held

    def orphan(self, session: GenerationSession) -> None:
        """Its reader went away (or read it to the end): cancelled and forgotten unless
        resumed within the grace period."""
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

    def close(self) -> None:
        for handle in self._grace.values():
            handle.cancel()
        self._grace.clear()
        for held in self._held.values():
            with contextlib.suppress(Exception):
                held.session.cancel()
        self._held.clear()

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
