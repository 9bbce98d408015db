"""One tokenpipe.v1 connection (JSON, multiplexed): frames in, session events out.

One reader task (frames in) and one writer task (frames out), raced: the first to end
cancels the other. News from sessions is flushed once per event-loop turn and connection,
in one transport write, straight from a loop callback while the socket takes data (the
FrameSink fast path); when it is backed up, the writer task waits for it (up to the
slow-client bound) and the sessions merge what piles up meanwhile, so a slow client gets
merged deltas instead of a growing queue. Every frame in, pings included, takes a token
from the frame budget (budget.py); a client that floods is told once a second, then
closed with 1008.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket

from ...errors import BadRequest, DuplicateId, TokenpipeError, TooManyStreams, UnknownId
from ...protocol import ws as wire
from ...session import Cursor, Failed, GenerationSession
from ..race import race
from ..resumable import Held
from ..runtime import SERVER_NAME, Runtime
from .budget import FrameBudget, Verdict
from .frame_sink import FrameSink

log = logging.getLogger("tokenpipe.ws")


@dataclass(slots=True)
class _Stream:
    """One generation as this connection reads it: the door's own per-stream record."""

    session: GenerationSession
    cursor: Cursor
    frame: wire.EventText  # its events as frame text


class Ending(enum.Enum):
    """Why the connection ends, when it does not end by the client's close."""

    NO = "no"
    SLOW = "slow"  # the client stopped reading and was let go: aborted, no close frame
    FLOOD = "flood"  # the client flooded frames past the budget: closed 1008


@dataclass
class _Outgoing:
    """The writer's state: frames out go by one loop callback or by the writer task."""

    flush_scheduled: bool = False  # a flush is due this loop turn
    writer_busy: bool = False  # the writer holds frames it has taken but not yet sent
    ending: Ending = Ending.NO
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # the writer has work
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # nothing left to send
    evicted: asyncio.Event = field(default_factory=asyncio.Event)  # ending is FLOOD


class JsonConnection:
    def __init__(self, websocket: WebSocket, runtime: Runtime) -> None:
        self.ws = websocket
        self.runtime = runtime
        self.settings = runtime.settings
        self.streams: dict[str, _Stream] = {}
        self.outbox: deque[str] = deque()  # frames that are not session events, as JSON
        self.dirty: dict[str, None] = {}  # ordered set of stream ids with news
        self.sink = FrameSink(websocket)
        self.loop = asyncio.get_running_loop()
        self.out = _Outgoing()
        self.budget = FrameBudget(self.settings.max_frames_per_second,
                                  self.settings.flood_close_s)

    async def run(self) -> None:
        await self.ws.accept(subprotocol=wire.PROTOCOL)
        self.send(wire.hello(SERVER_NAME, self.runtime.models.states(), self.runtime.limits()))
        self.runtime.connections.add(self)
        log.debug("tokenpipe.v1 connection: frames %s", "written directly" if self.sink.direct
                  else "through the ASGI send")
        # control frames (pings) count in the budget too; the protocol's stall bound comes
        # after ours; the writer times the stall however the buffer filled
        self.sink.gate(self._admit, self.settings.slow_client_timeout_s + 2,
                       self.out.wake.set)
        try:
            await race(self._reader(), self._writer(), self._until_evicted())
        finally:
            self.sink.ungate()
            self.runtime.connections.discard(self)
            for stream_id, stream in list(self.streams.items()):
                self._release(stream_id, stream, connection_lost=True)
            if self.out.ending is Ending.SLOW:  # a close frame would wait behind unread data
                self.sink.abort()
            elif self.out.ending is Ending.NO:
                await self._close(1000)

    async def close_when_flushed(self, code: int, deadline_s: float = 5.0) -> None:
        """Closes the socket once every stream on it has sent its final frame, or at the
        deadline; a client that does not take its close frame is cut off soon after."""
        if self.streams or self.outbox or self.dirty or self.out.writer_busy:
            self.out.settled.clear()
            self.out.wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.out.settled.wait(), deadline_s)
        await self._close(code, "server shutting down", hard=True)

    def abort(self) -> None:
        """Gone now, unsent frames and all (shutdown past its deadline)."""
        self.sink.abort()

    async def _close(self, code: int, reason: str = "", *, hard: bool = False,
                     deaf: bool = False, wait_s: float = 1.0) -> None:
        """Sends the close frame, waiting at most `wait_s` (it queues behind whatever the
        client has not read); `hard`: the socket goes within `wait_s` more, answered or not;
        `deaf`: nothing more is read (a flood's backlog is not parsed to find a reply)."""
        if deaf:
            self.sink.stop_reading()
        try:
            async with asyncio.timeout(wait_s):
                await self.ws.close(code=code, reason=reason)
        except TimeoutError:
            self.sink.abort()
            return
        except Exception:  # closed already, or the client is gone
            pass
        if hard:
            self.sink.abort_later(wait_s)

    def send(self, frame: dict[str, Any]) -> None:
        """Queues a frame that is not a session event (hello, pong, rejected frames)."""
        if frame["type"] == "error":
            self.runtime.metrics.errors.labels(frame["code"], "ws").inc()
        try:
            text = wire.dumps(frame)
        except (ValueError, TypeError, RecursionError):  # never expected: parse refuses it
            log.exception("a %s frame could not be encoded; sent an error instead",
                          frame["type"])
            text = wire.dumps(wire.error("bad_request", f"the {frame['type']} frame could "
                                         "not be encoded"))
        self.outbox.append(text)
        self._kick()

    def _mark(self, stream_id: str) -> None:
        self.dirty[stream_id] = None
        self._kick()

    def _kick(self) -> None:
        if not self.sink.direct:
            self.out.wake.set()
        elif not self.out.flush_scheduled:
            self.out.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Once per loop turn with news: everything pending, in one write, unless the
        socket is backed up (or the writer is busy): then the writer task takes over."""
        self.out.flush_scheduled = False
        if self.out.writer_busy or not self.sink.ready():
            self.out.wake.set()
            return
        texts = self._collect(merge=False)
        if texts:
            self.sink.write_now(texts)
            if not self.sink.ready():  # now backed up: the writer watches for a stall
                self.out.wake.set()
        if not self.streams:
            self.out.settled.set()

    def _collect(self, merge: bool) -> list[str]:
        """Every pending frame as text, in order; streams that sent their final frame end.
        `merge`: the socket was backed up, so each stream's pending text goes as one delta."""
        texts = list(self.outbox)
        self.outbox.clear()
        dirty = list(self.dirty)
        self.dirty.clear()
        for stream_id in dirty:
            stream = self.streams.get(stream_id)
            if stream is None:
                continue
            events = stream.cursor.poll(merge)
            if (events and isinstance(events[-1], Failed)
                    and self.runtime.resumable.hands_over(stream.session)):
                events.pop()  # no end here: the client resumes on another replica (1012)
            texts.extend(stream.frame(e) for e in events)
            if stream.cursor.finished:
                self._release(stream_id, stream, connection_lost=False)
        return texts

    def _release(self, stream_id: str, stream: _Stream, *, connection_lost: bool) -> None:
        self.streams.pop(stream_id, None)
        session = stream.session
        if session.resumable:
            if connection_lost or session.final is not None:
                self.runtime.resumable.orphan(session)  # kept for the grace, then forgotten
        elif connection_lost:
            stream.cursor.close()
            session.cancel()

    # ---- frames in ----------------------------------------------------------------------
    def _admit(self) -> bool:
        """Takes one frame from the budget (called for pings by the protocol as well)."""
        verdict = self.budget.take()
        if verdict is Verdict.PASS:
            return True
        self.sink.hold_reading(self.budget.hold_s())  # the rest of the flood waits in TCP
        if verdict is Verdict.NOTIFY:
            self.send(wire.error("rate_limited", self.budget.notice(),
                                 retry_after_ms=self.budget.retry_after_ms()))
        elif verdict is Verdict.EVICT:
            self.out.ending = Ending.FLOOD
            self.out.evicted.set()
        return False

    async def _until_evicted(self) -> None:
        await self.out.evicted.wait()
        log.warning("client over its frame budget for %.0f s; closing it (1008)",
                    self.settings.flood_close_s)
        await self._close(1008, "too many frames per second, for too long", hard=True,
                          deaf=True)

    async def _reader(self) -> None:
        limit = self.settings.max_message_bytes
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            if not self._admit():
                continue
            text = message.get("text")
            if text is None:
                self.send(wire.error("bad_request", "binary frames are not accepted; send JSON "
                                     "text frames"))
                continue
            if len(text) > limit or len(text.encode()) > limit:
                self.send(wire.error("bad_request", f"frame exceeds max_message_bytes ({limit})"))
                continue
            try:
                frame = wire.parse_client_frame(text)
                await self._handle(frame)
            except TokenpipeError as exc:
                self._refuse(text, exc)
            except Exception:  # a bug must cost this frame, not the connection's streams
                log.exception("handling a client frame failed")
                self._refuse(text, TokenpipeError("the server failed to handle this frame"))

    def _refuse(self, text: str, exc: TokenpipeError) -> None:
        sid = wire.frame_id(text)
        if sid in self.streams and exc.code not in ("duplicate_id", "unknown_id"):
            sid = None  # an error naming a running generation would end it
        self.send(wire.error_of(exc, sid))

    async def _handle(self, frame: wire.ClientFrame) -> None:
        """One frame at a time, in order: a `cancel` right after its `generate` finds it
        (a long prompt is tokenized off the loop, and this connection's next frame waits)."""
        if isinstance(frame, wire.Generate):
            await self._generate(frame)
        elif isinstance(frame, wire.Cancel):
            stream = self.streams.get(frame.id)
            if stream is None:
                raise UnknownId(f"no running generation with id {frame.id!r}")
            stream.session.cancel()
        elif isinstance(frame, wire.Ping):
            self.send(wire.pong(frame.data))
        else:
            await self._resume(frame)

    async def _generate(self, frame: wire.Generate) -> None:
        if frame.id in self.streams:
            raise DuplicateId(f"id {frame.id!r} is already running on this connection")
        if len(self.streams) >= self.settings.max_streams_per_connection:
            raise TooManyStreams(
                f"at most {self.settings.max_streams_per_connection} generations per connection"
            )
        session = await self.runtime.models.start(frame.to_request(), resumable=frame.resumable,
                                                  api="ws")
        token = session.stream_token
        if token is not None:  # resumable: read through the store, as a resume reads it
            self.runtime.resumable.keep(Held(session, frame.id))
            cursor = self.runtime.resumable.take_over(token, -1, self,
                                                      on_news=self._news(frame.id),
                                                      progress=True)
        else:
            cursor = session.cursor(on_news=self._news(frame.id), progress=True)
        self._adopt(frame.id, session, cursor)

    async def _resume(self, frame: wire.Resume) -> None:
        held = await self.runtime.resumable.find(frame.stream, frame.after_seq)
        if held is None:
            raise UnknownId("no resumable generation for that stream token (expired or unknown)")
        session = held.session
        stream_id = frame.id or held.stream_id
        if stream_id in self.streams and self.streams[stream_id].session is not session:
            raise DuplicateId(f"id {stream_id!r} is already running on this connection")
        try:  # checked before anything changes hands: a refused resume disturbs nothing
            cursor = self.runtime.resumable.take_over(
                frame.stream, frame.after_seq, self, stream_id=stream_id,
                on_news=self._news(stream_id), progress=True)
        except ValueError as exc:
            raise BadRequest(f"field 'after_seq': {exc}", param="after_seq") from None
        self._adopt(stream_id, session, cursor)

    def _news(self, stream_id: str) -> Callable[[], None]:
        return lambda: self._mark(stream_id)

    def _adopt(self, stream_id: str, session: GenerationSession, cursor: Cursor) -> None:
        self.streams[stream_id] = _Stream(session, cursor, wire.EventText(stream_id))
        self._mark(stream_id)

    def moved(self, session: GenerationSession, new_id: str | None = None) -> None:
        """A resume took `session` over: from another connection, or from this one under
        `new_id` (the old id ends with `moved` rather than stay as a zombie)."""
        for stream_id, stream in list(self.streams.items()):
            if stream.session is session and stream_id != new_id:
                self.streams.pop(stream_id)
                where = ("another connection" if new_id is None
                         else f"this connection as id {new_id!r}")
                self.send(wire.error("moved", f"a resume from {where} took this generation "
                                     "over", stream_id))

    # ---- frames out ---------------------------------------------------------------------
    async def _writer(self) -> None:
        while True:
            await self.out.wake.wait()
            self.out.wake.clear()
            self.out.writer_busy = True
            try:
                while True:  # also when nothing is pending: a backed-up socket is watched
                    await self._drained()
                    if not (self.outbox or self.dirty):
                        break
                    await self.sink.write(self._collect(merge=True),
                                          self.settings.slow_client_timeout_s)
            except TimeoutError as exc:
                log.warning("%s; dropping it", exc.args[0] if exc.args else "client too slow")
                self.out.ending = Ending.SLOW  # run() cuts it off; its generations are cancelled
                return
            self.out.writer_busy = False
            if not self.streams:
                self.out.settled.set()

    async def _drained(self) -> None:
        """Waits until the client takes data again. TimeoutError after the slow-client
        bound, or sooner (flood_close_s) for a client that is over its frame budget as
        well: one that floods and does not read."""
        slow = self.settings.slow_client_timeout_s
        step = min(slow, self.settings.flood_close_s) if self.settings.flood_close_s > 0 else slow
        since = time.monotonic()
        waited = 0.0
        while True:
            try:
                await self.sink.drained(step)
                return
            except TimeoutError:
                waited += step
                if self.budget.refused_since(since - self.budget.interval_s):
                    raise TimeoutError(f"client flooded frames and read nothing for "
                                       f"{waited:.0f} s") from None
                if waited >= slow:
                    raise TimeoutError(f"client stopped reading for {waited:.0f} s") from None
