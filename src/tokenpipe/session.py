"""GenerationSession: one generation, transport-neutral.

The scheduler runs the engine and writes into the session; every door reads it the same
way, through a Cursor (`await cursor.next()`, `async for event in cursor`, or `poll()`
from a loop callback). A resumable session may have several readers, each from its own
seq (a resume, a background response's followers); who reads it for whom is the resume
store's record (server/resumable.py). Text is kept as pending pieces until a reader takes
them: a reader that keeps up gets one delta per piece the engine produced, a reader whose
socket is backed up gets the pieces merged into one delta (pieces.py), and `seq` stays
contiguous either way. A resumable session keeps every delta it has sealed so a new reader
can replay from any seq; a session nobody can resume lets each delta go once read, so it
has one reader. The session holds no door's state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import secrets
import time
from collections.abc import AsyncIterator, Callable

from .engines.base import PreparedRequest
from .errors import TokenpipeError
from .pieces import delta_of, merged
from .types import (
    Delta,
    Event,
    Failed,
    Finished,
    FinishReason,
    Part,
    Progress,
    Queued,
    Started,
    Timing,
    Usage,
)

__all__ = ["Cursor", "Delta", "Event", "Failed", "Finished", "GenerationSession", "Progress",
           "Queued", "Started", "State"]


class State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


class GenerationSession:
    def __init__(
        self, prepared: PreparedRequest | None, model: str, *, resumable: bool = False,
        api: str = "other",
    ) -> None:
        self._prepared = prepared
        self.model = model
        self.api = api  # the door it came in by (server/doors.py), the metrics' label
        self.loading = False  # queued while its model loads (load on demand)
        self.resumable = resumable
        self.stream_token = secrets.token_urlsafe(24) if resumable else None
        self.request_id = "gen-" + secrets.token_hex(8)
        self.state = State.QUEUED
        self.position = 0
        self.prompt_tokens: int | None = None
        self.prompt_ids: tuple[int, ...] | None = None  # where kept (scheduler.py `keep_ids`)
        self._loose: list[int] = []  # ids whose text has not come yet
        self.progress: Progress | None = None  # a long prompt's prefill so far
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.reasoning_tokens = 0
        self.drafted_tokens = 0  # speculative decoding's drafts, and those the answer took
        self.accepted_tokens = 0
        self.created = time.perf_counter()
        self.started_at: float | None = None
        self.first_token_at: float | None = None
        self.final: Finished | Failed | None = None
        # delta texts (content) or Parts (other channels) from seq self._base on
        self._sealed: list[str | Part] = []
        self._base = 0
        self._pending: list[str | Part] = []
        self._parts = False  # a Part was ever added (else pending is all content strings)
        self._readers: list[Cursor] = []  # the cursors told of news
        self._cancel: Callable[[], object] | None = None
        self.done = asyncio.Event()
        # a shared store's log (server/state/): readers get the deltas below seq `logged`
        # and the final event once `final_logged`, so no client has what the log has not
        # (None: no gate; the log's own reader is ungated)
        self.logged: int | None = None
        self.final_logged = False

    @classmethod
    def loading_model(cls, model: str, *, resumable: bool = False,
                      api: str = "other") -> GenerationSession:
        """A session whose model is being loaded: queued, `loading`, its request prepared
        (attach()) once the model is in memory."""
        session = cls(None, model, resumable=resumable, api=api)
        session.loading = True
        return session

    @property
    def prepared(self) -> PreparedRequest:
        assert self._prepared is not None, "the session's model has not loaded yet"
        return self._prepared

    def attach(self, prepared: PreparedRequest, model: str) -> None:
        """Its model has loaded and the scheduler took the request (queued or running)."""
        self._prepared, self.model, self.loading = prepared, model, False
        self._notify()

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

    def set_progress(self, done: int, total: int) -> None:
        self.progress = Progress(done, total)
        self._notify()

    def add_text(self, text: str, tokens: int, ids: tuple[int, ...] = ()) -> None:
        """`ids` (where kept) go with the next text that comes: a token may end inside a
        character or in text a stop string holds; ids whose text never comes go nowhere."""
        self.completion_tokens += tokens
        self._loose.extend(ids)
        if text:
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            self._pending.append(self._with_ids(text) if self._loose else text)
            self._notify()

    def add_pieces(self, pieces: list[str | Part], tokens: int,
                   ids: tuple[int, ...] = ()) -> None:
        """Content strings and Parts of other channels (reasoning, tool calls), in order
        (`ids` as add_text says)."""
        self.completion_tokens += tokens
        self._loose.extend(ids)
        kept = [p for p in pieces if not isinstance(p, str) or p]
        if not kept:
            return
        if self._loose:
            kept[0] = self._with_ids(kept[0])
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        if any(not isinstance(p, str) for p in kept):
            self._parts = True
        self._pending.extend(kept)
        self._notify()

    def _with_ids(self, piece: str | Part) -> Part:  # the ids waiting for text (add_text)
        ids, self._parts = tuple(self._loose), True
        self._loose.clear()
        piece = Part(piece, "content") if isinstance(piece, str) else piece
        return dataclasses.replace(piece, token_ids=piece.token_ids + ids)

    def finish(self, reason: FinishReason, stop_sequence: str | None = None) -> None:
        if self.final is None:
            self.final = Finished(reason, self.usage(), self._timing(), stop_sequence)
            self._end()

    def fail(self, error: TokenpipeError) -> None:
        if self.final is None:
            self.final = Failed(error, self.usage())
            self._end()

    # ---- written by a replay of another process' log (server/state/) ----------------
    def replay(self, delta: Delta) -> None:
        """The next delta exactly as the producing session sealed it: the same seq (the
        next one here), text, channel and call; a replayed session is fed only this way."""
        if delta.seq != self.next_seq:
            raise ValueError(f"replayed seq {delta.seq}, expected {self.next_seq}")
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        if not self._parts and Delta(delta.seq, delta.text) == delta:  # plain content
            self._sealed.append(delta.text)
        else:
            self._parts = True
            self._sealed.append(Part(delta.text, delta.channel, delta.index, delta.call_id,
                                     delta.name, delta.logprobs, delta.token_ids))
        self._notify()

    def log_reached(self, logged: int | None, final: bool = False) -> None:
        """The gate (`logged`) moved: readers are told of what they may now take."""
        self.logged, self.final_logged = logged, final
        self._notify()

    def end_with(self, final: Finished | Failed) -> None:
        """The producing session's final event, as it was."""
        if self.final is None:
            self.final = final
            self.completion_tokens = final.usage.completion_tokens
            self.drafted_tokens = final.usage.drafted_tokens
            self.accepted_tokens = final.usage.accepted_tokens
            self._end()

    def bind_cancel(self, cancel: Callable[[], object]) -> None:
        self._cancel = cancel

    # ---- used by adapters ---------------------------------------------------------------
    def cancel(self) -> None:
        """Stops the generation now, queued or running; it ends with finish_reason cancelled."""
        if self.final is None and self._cancel is not None:
            self._cancel()

    def cursor(self, after_seq: int = -1, on_news: Callable[[], None] | None = None, *,
               progress: bool = False, gated: bool = True) -> Cursor:
        """A reader from `after_seq` on, beside any others (only a resumable session keeps
        what one reader took for the next); `on_news` is called, on the loop, whenever
        there is something to take; `progress`: it is told of a long prompt's prefill
        (Progress) before the first delta. ValueError as check_after() says."""
        self.check_after(after_seq)
        cursor = Cursor(self, after_seq, on_news, progress, gated)
        self._readers.append(cursor)
        return cursor

    def check_after(self, after_seq: int) -> None:
        """ValueError when a reader cannot start after `after_seq`: it is no longer kept,
        or beyond the last delta any reader was sent (a client cannot have seen it)."""
        if after_seq + 1 < self._base:
            raise ValueError(f"deltas before seq {self._base} are no longer kept")
        if after_seq >= self.next_seq:
            raise ValueError(f"after_seq {after_seq} is beyond the last delta sent so far "
                             f"(seq {self.next_seq - 1})")

    def events(self, after_seq: int = -1) -> Cursor:
        """A cursor to iterate (`async for event in session.events()`), for a reader that
        serves this one session alone."""
        return self.cursor(after_seq)

    def detach(self, cursor: Cursor) -> None:
        """`cursor` stops being told of news (its reader went away)."""
        if cursor in self._readers:
            self._readers.remove(cursor)

    def usage(self) -> Usage:
        return Usage(self.prompt_tokens or 0, self.completion_tokens, self.cached_tokens,
                     self.reasoning_tokens, self.drafted_tokens, self.accepted_tokens)

    @property
    def next_seq(self) -> int:
        return self._base + len(self._sealed)

    # ---- used by the cursor -------------------------------------------------------------
    def _take_deltas(self, after_seq: int, merge: bool) -> list[Delta]:
        """Pending text becomes deltas (one per piece, or with `merge` one for all of it);
        returns every delta after `after_seq`. They count as sent: a session nobody can
        resume lets them go."""
        pending = self._pending
        if self._parts:
            if pending:
                self._sealed.extend(merged(pending) if merge else pending)
                pending.clear()
        elif len(pending) == 1 or (merge and pending):
            self._sealed.append("".join(pending))  # type: ignore[arg-type]  # all str
            pending.clear()
        elif pending:
            self._sealed.extend(pending)
            pending.clear()
        base, sealed = self._base, self._sealed
        first = max(after_seq + 1, base)
        if self._parts:
            out = [delta_of(seq, sealed[seq - base]) for seq in range(first, base + len(sealed))]
        else:
            out = [Delta(seq, sealed[seq - base]) for seq in  # type: ignore[arg-type]
                   range(first, base + len(sealed))]
        if not self.resumable and sealed:
            self._base = base + len(sealed)
            sealed.clear()
        return out

    # ---- internals ----------------------------------------------------------------------
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
        for reader in self._readers:
            reader.news()


class Cursor:
    """A reader's position in a session. `poll()` never blocks; `next()` waits for news;
    iterating yields every event up to the final one. Text that piled up while the reader
    was away comes merged into one delta (`merge=False`: one delta per engine piece)."""

    def __init__(self, session: GenerationSession, after_seq: int,
                 on_news: Callable[[], None] | None = None, progress: bool = False,
                 gated: bool = True) -> None:
        self.session = session
        self.gated = gated  # held back by the session's log gate (GenerationSession.logged)
        self.after = after_seq
        self._on_news = on_news
        self._progress = progress
        self._sent_done = -1  # the prefill progress last sent (0 is news: it began)
        self._news = asyncio.Event()
        self._woken = False
        self._sent_position = 0
        self._sent_loading = False
        self._sent_start = False
        self._sent_final = False

    def news(self) -> None:
        """Called by the session when it changed."""
        self._news.set()
        if self._on_news is not None:
            self._on_news()

    def wake(self) -> None:
        """Makes a waiting next() return, with nothing if nothing happened (a ping is due)."""
        self._woken = True
        self._news.set()

    def close(self) -> None:
        """This reader is gone: the session tells it nothing more."""
        self.session.detach(self)

    def poll(self, merge: bool = True) -> list[Event]:
        """Every event not yet taken."""
        s = self.session
        out: list[Event] = []
        if self._sent_final:
            return out
        if s.state is State.QUEUED and s.final is None:
            if s.loading and not self._sent_loading:
                self._sent_loading = True
                out.append(Queued(0, loading=True))
            if s.position and s.position != self._sent_position:
                self._sent_position = s.position
                out.append(Queued(s.position))
            return out
        if not self._sent_start and (s.started_at is not None or s.final is None):
            self._sent_start = True
            out.append(Started(s.model, s.prompt_tokens, s.stream_token))
        # the latest progress only (a reader behind skips the steps between), before deltas
        if self._progress and s.progress is not None and self.after < 0 and (
                s.progress.done > self._sent_done):
            self._sent_done = s.progress.done
            out.append(s.progress)
        deltas = s._take_deltas(self.after, merge)
        if s.logged is not None and self.gated:
            deltas = [d for d in deltas if d.seq < s.logged]
            out += deltas
            if deltas:
                self.after = deltas[-1].seq
            if s.final is not None and s.final_logged and self.after >= s.next_seq - 1:
                self._sent_final = True
                out.append(s.final)
            return out
        out += deltas
        self.after = s.next_seq - 1
        if s.final is not None:
            self._sent_final = True
            out.append(s.final)
        return out

    async def next(self, merge: bool = True) -> list[Event]:
        """The events not yet taken, waiting until there are some; [] only after wake()
        (and after the final event, which ends the reading)."""
        while not self._sent_final:
            self._news.clear()
            batch = self.poll(merge)
            if batch:
                return batch
            if self._woken:
                self._woken = False
                return []
            await self._news.wait()
        return []

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._each()

    async def _each(self) -> AsyncIterator[Event]:
        while not self._sent_final:
            for event in await self.next():
                yield event

    @property
    def finished(self) -> bool:
        return self._sent_final
