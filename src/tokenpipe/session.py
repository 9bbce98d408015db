"""GenerationSession: one generation, transport-neutral.

The scheduler runs the engine and writes into the session; one adapter at a time reads it
through a cursor. Text is kept as pending pieces until a reader takes them: a reader that
keeps up gets one delta per piece the engine produced, a reader whose socket is backed up
gets the pieces merged into one delta, and `seq` stays contiguous either way. A resumable session
keeps every delta it has sealed so a new reader can replay from any seq.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from .engines.base import PreparedRequest
from .errors import TokenpipeError
from .types import FinishReason, Timing, Usage


@dataclass(frozen=True, slots=True)
class Queued:
    position: int  # 1 = next


@dataclass(frozen=True, slots=True)
class Started:
    model: str
    prompt_tokens: int | None
    stream: str | None  # resume token, only for resumable sessions


@dataclass(frozen=True, slots=True)
class Delta:
    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    reason: FinishReason
    usage: Usage
    timing: Timing


@dataclass(frozen=True, slots=True)
class Failed:
    error: TokenpipeError
    usage: Usage


Event = Queued | Started | Delta | Finished | Failed


class State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class GenerationSession:
    def __init__(
        self, prepared: PreparedRequest, model: str, *, resumable: bool = False
    ) -> None:
        self.prepared = prepared
        self.model = model
        self.resumable = resumable
        self.stream_token = secrets.token_urlsafe(24) if resumable else None
        self.request_id = "gen-" + secrets.token_hex(8)
        self.state = State.QUEUED
        self.position = 0
        self.prompt_tokens: int | None = None
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.created = time.perf_counter()
        self.started_at: float | None = None
        self.first_token_at: float | None = None
        self.final: Finished | Failed | None = None
        self._sealed: list[str] = []  # delta texts from seq self._base on
        self._base = 0
        self._pending: list[str] = []
        self._changed = asyncio.Event()
        self._listener: Callable[[], None] | None = None
        self._cancel: Callable[[], object] | None = None
        self.done = asyncio.Event()
        self.client_id: str | None = None  # the id its current reader calls it by
        self.owner: object | None = None  # the connection reading it now

    # ---- written by the scheduler -------------------------------------------------------
    def set_position(self, position: int) -> None:
        if position != self.position:
            self.position = position
            self._notify()

    def mark_started(self, prompt_tokens: int | None) -> None:
        self.state = State.RUNNING
        self.started_at = time.perf_counter()
        self.prompt_tokens = prompt_tokens
        self._notify()

    def add_text(self, text: str, tokens: int) -> None:
        self.completion_tokens += tokens
        if text:
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            self._pending.append(text)
            self._notify()

    def finish(self, reason: FinishReason) -> None:
        if self.final is None:
            self.final = Finished(reason, self.usage(), self._timing())
            self._end()

    def fail(self, error: TokenpipeError) -> None:
        if self.final is None:
            self.final = Failed(error, self.usage())
            self._end()

    def bind_cancel(self, cancel: Callable[[], object]) -> None:
        self._cancel = cancel

    # ---- used by adapters ---------------------------------------------------------------
    def cancel(self) -> None:
        """Stops the generation now, queued or running; it ends with finish_reason cancelled."""
        if self.final is None and self._cancel is not None:
            self._cancel()

    def attach(self, listener: Callable[[], None] | None) -> None:
        """Makes `listener` the one reader notified of changes (a resume swaps it)."""
        self._listener = listener

    def cursor(self, after_seq: int = -1) -> Cursor:
        """A reader from `after_seq` on; ValueError when that is no longer kept or beyond
        the last delta any reader was sent (a client cannot have seen it)."""
        if after_seq + 1 < self._base:
            raise ValueError(f"deltas before seq {self._base} are no longer kept")
        if after_seq >= self.next_seq:
            raise ValueError(f"after_seq {after_seq} is beyond the last delta sent so far "
                             f"(seq {self.next_seq - 1})")
        return Cursor(self, after_seq)

    async def events(self, after_seq: int = -1) -> AsyncIterator[Event]:
        """Every event from after_seq on, for adapters that serve one session alone."""
        cursor = self.cursor(after_seq)
        while True:
            self._changed.clear()
            batch = cursor.poll()
            for event in batch:
                yield event
                if isinstance(event, Finished | Failed):
                    return
            if not batch:
                await self._changed.wait()

    def usage(self) -> Usage:
        return Usage(self.prompt_tokens or 0, self.completion_tokens, self.cached_tokens)

    @property
    def next_seq(self) -> int:
        return self._base + len(self._sealed)

    # ---- internals ----------------------------------------------------------------------
    def _seal(self, merge: bool) -> None:
        pending = self._pending
        if len(pending) == 1 or (merge and pending):
            self._sealed.append("".join(pending))
            pending.clear()
        elif pending:
            self._sealed.extend(pending)
            pending.clear()

    def _forget_before(self, seq: int) -> None:
        if not self.resumable and seq > self._base:
            del self._sealed[: seq - self._base]
            self._base = seq

    def _timing(self) -> Timing:
        now = time.perf_counter()
        start = self.started_at if self.started_at is not None else now
        ttft = None if self.first_token_at is None else (self.first_token_at - self.created)
        rate = None
        if self.first_token_at is not None and self.completion_tokens > 1:
            span = now - self.first_token_at
            if span > 0:
                rate = (self.completion_tokens - 1) / span
        return Timing(
            queue_ms=round((start - self.created) * 1000, 2),
            ttft_ms=None if ttft is None else round(ttft * 1000, 2),
            total_ms=round((now - self.created) * 1000, 2),
            tokens_per_s=None if rate is None else round(rate, 2),
        )

    def _end(self) -> None:
        self.state = State.DONE
        self.done.set()
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        if self._listener is not None:
            self._listener()


class Cursor:
    """A reader's position in a session. poll() never blocks."""

    def __init__(self, session: GenerationSession, after_seq: int) -> None:
        self.session = session
        self.after = after_seq
        self._sent_position = 0
        self._sent_start = False
        self._sent_final = False

    def poll(self, merge: bool = True) -> list[Event]:
        """Every event not yet taken. `merge`: pending pieces of text become one delta (for
        a reader that fell behind); else one delta per piece."""
        s = self.session
        out: list[Event] = []
        if self._sent_final:
            return out
        if s.state is State.QUEUED and s.final is None:
            if s.position and s.position != self._sent_position:
                self._sent_position = s.position
                out.append(Queued(s.position))
            return out
        if not self._sent_start and (s.started_at is not None or s.final is None):
            self._sent_start = True
            out.append(Started(s.model, s.prompt_tokens, s.stream_token))
        s._seal(merge)
        for seq in range(max(self.after + 1, s._base), s.next_seq):
            out.append(Delta(seq, s._sealed[seq - s._base]))
        self.after = s.next_seq - 1
        s._forget_before(self.after + 1)
        if s.final is not None:
            self._sent_final = True
            out.append(s.final)
        return out

    @property
    def finished(self) -> bool:
        return self._sent_final
