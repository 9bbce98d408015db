"""The one stream tail of every HTTP door (OpenAI with its `n` choices and resumable SSE,
Anthropic, Responses foreground and background, Ollama's NDJSON): an ASGI response whose
status and headers wait for the session's first events; the session's events raced
against the client's leaving (race.py), so a client that goes away cancels its generation
at once (a resumable one: its grace period starts); the idle ping timer; a failure before
the first byte refused with the door's own error status; one write a batch.

A door subclasses it with what differs: its stream headers, its error response
(`error_response`), its whole answer (`_answer`) and its stream's chunks (`_opening`,
`_delta`, `_closing`; what it says while waiting, `_waiting`, `_progress`). A door that
reads otherwise says where its cursor comes from (`_reader`: a resume store's take-over,
n choices merged) and what its client leaving does (`_leave`); one whose chunks are not
one per delta (Ollama's whole tool calls, n choices) takes the events before its stream
opened (`_begin`, `_end`), and keeps `_opened` False for every event to come that way.

The ping timer is armed once and moved on lazily: a token only notes its time, and the
timer, when it fires early, re-arms itself for the rest (no timer per token)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Protocol

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..errors import TokenpipeError
from ..protocol import sse
from ..session import Delta, Event, Failed, Finished, GenerationSession, Queued
from ..types import Progress
from .race import http_disconnect, race

PING_INTERVAL_S = 15.0  # default of Settings.sse_ping_interval_s
Headers = list[tuple[bytes, bytes]]
_ASIDE = (Queued, Progress)  # what an SSE stream says in a comment, not in the door's shape


def stream_headers(content_type: bytes) -> Headers:
    """A streamed answer's headers: its type, never cached, and each chunk passed on by
    a proxy at once (nginx: `X-Accel-Buffering: no`)."""
    return [(b"content-type", content_type), (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no")]


# every door's server-sent events (OpenAI's and Anthropic's APIs send this type too)
SSE_HEADERS = stream_headers(b"text/event-stream; charset=utf-8")


def retry_headers(exc: TokenpipeError, *, ms: bool = True) -> dict[str, str]:
    """`Retry-After` in whole seconds (at least 1) when `exc` has a retry time, and with
    `ms` `retry-after-ms` too (the OpenAI and Anthropic SDKs honour it)."""
    if exc.retry_after_ms is None:
        return {}
    headers = {"retry-after": str(max(1, math.ceil(exc.retry_after_ms / 1000)))}
    if ms:
        headers["retry-after-ms"] = str(exc.retry_after_ms)
    return headers


class Reading(Protocol):
    """What an answer reads its events from: a session's Cursor, or several read as one."""

    async def next(self) -> list[Any]:
        """The events not yet taken, waiting for some; [] after wake() or the end."""
        ...

    def wake(self) -> None:
        """A waiting next() returns now (a ping is due)."""

    def close(self) -> None:
        """The reader is gone."""

    def __aiter__(self) -> AsyncIterator[Any]: ...


class HeadFirst:
    """The writes of one streamed answer: status 200 and `headers` go out with its first
    bytes, so until then a failure can still be a proper error status (`sent` says)."""

    __slots__ = ("headers", "sent")

    def __init__(self, headers: Headers) -> None:
        self.headers = headers
        self.sent = False

    async def start(self, send: Send) -> None:
        """The status and headers now, before any bytes (a stream that commits at once)."""
        if not self.sent:
            self.sent = True
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})

    async def write(self, send: Send, out: list[bytes], ended: bool) -> bool:
        """One batch's bytes, in one send; whether the answer is over. Nothing to say (a
        Started alone): nothing sent, the headers neither."""
        if not out:
            return False
        if not self.sent:
            self.sent = True
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": b"".join(out), "more_body": not ended})
        return ended


class DoorResponse(Response):
    """One generation's answer: `_stream` when `stream`, else `_whole`. `progress`: the
    door's stream says a long prompt's prefill progress (Progress events)."""

    progress = False
    stream_headers: ClassVar[Headers] = []  # the door's, of a streamed answer
    opens: ClassVar[tuple[type, ...]] = (Delta, Finished)  # the events its opening precedes
    ping: ClassVar[bytes] = sse.comment("ping")  # what an idle SSE stream hears every ping_s

    def __init__(self, session: GenerationSession, *, stream: bool,
                 ping_s: float | None = PING_INTERVAL_S) -> None:
        self.session = session
        self.stream = stream
        self.ping_s = ping_s if ping_s else None  # 0 or None: no pings
        self._ping: asyncio.TimerHandle | None = None
        self._active = 0.0  # loop time of the last wait for events (pings: idle since)
        self._scope: Scope = {"type": "http"}
        self._head = HeadFirst(self.stream_headers)
        self._opened = False  # the stream's opening is said: a delta is one chunk now
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._scope = scope
        cursor = self._reader()
        try:
            await race(self._stream(cursor, send) if self.stream else self._whole(cursor, send),
                       http_disconnect(receive), settle=False)  # it only reads receive
        except OSError:  # the client went away while we wrote
            pass
        finally:
            if self._ping is not None:
                self._ping.cancel()
            self._leave(cursor)
        if self.background is not None:
            await self.background()

    def _reader(self) -> Reading:
        """The cursor the answer reads: the session's, from its start."""
        return self.session.cursor(progress=self.stream and self.progress)

    def _leave(self, cursor: Reading) -> None:
        """The answer is over, or its client left: the generation stops (a no-op once it
        ended)."""
        cursor.close()
        self.session.cancel()

    async def _stream(self, cursor: Reading, send: Send) -> None:
        head = self._head
        while True:
            out: list[bytes] = []
            ended = False
            for event in await self._events(cursor, out):
                if self._opened and isinstance(event, Delta):
                    out.append(self._delta(event))  # the common event: one chunk
                elif isinstance(event, Failed) and self._refusable(out):
                    return await self._refuse(event.error, send)
                elif isinstance(event, Finished | Failed):
                    ended = await self._end(event, out)
                else:
                    self._begin(event, out)
            if await head.write(send, out, ended):
                return

    def _refusable(self, out: list[bytes]) -> bool:
        """Whether a failure now can still be the door's error status: nothing of the
        stream is said (`out`: what this batch says so far)."""
        return not (self._opened or self._head.sent)

    def _begin(self, event: object, out: list[bytes]) -> None:
        """An event before the stream opened (the first delta opens it), or one that says
        nothing (Started)."""
        if isinstance(event, Delta):
            self._open(event, out)
            out.append(self._delta(event))

    def _open(self, event: Event, out: list[bytes]) -> None:
        self._opened = True
        out.append(self._opening(event))

    async def _end(self, end: Finished | Failed, out: list[bytes]) -> bool:
        """The session's last event in `out`; whether the answer is over with it."""
        if not self._opened and isinstance(end, self.opens):
            self._open(end, out)
        out.append(await self._closing(end))
        return True

    def _opening(self, event: Event) -> bytes:
        """The stream's first chunk, before `event` (one of `opens`)."""
        raise NotImplementedError

    def _delta(self, event: Delta) -> bytes:
        raise NotImplementedError

    async def _closing(self, end: Finished | Failed) -> bytes:
        """The stream's last chunks: its end, or its failure after it opened."""
        raise NotImplementedError

    def error_response(self, exc: TokenpipeError) -> Response:
        """`exc` in the door's own shape, with its status."""
        raise NotImplementedError

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        """The door's whole answer: its object of these deltas."""
        raise NotImplementedError

    async def _refuse(self, exc: TokenpipeError, send: Send) -> None:
        """The answer is the door's error response (no byte of another has gone out)."""
        await self.error_response(exc)(self._scope, no_receive, send)

    async def _whole(self, cursor: Reading, send: Send) -> None:
        deltas: list[Delta] = []
        async for event in cursor:
            if isinstance(event, Delta):
                deltas.append(event)
            elif isinstance(event, Finished):
                await (await self._answer(deltas, event))(self._scope, no_receive, send)
                return
            elif isinstance(event, Failed):
                await self._refuse(event.error, send)
                return

    def _waiting(self, event: Queued) -> bytes:
        """What a request waiting for its place hears (an SSE comment)."""
        return sse.waiting(event.position, event.loading)

    def _progress(self, event: Progress) -> bytes:
        """What a long prompt's prefill says before the first token (an SSE comment)."""
        return sse.progress(event.done, event.total)

    async def _events(self, cursor: Reading, out: list[bytes]) -> list[Any]:
        """The next events for the door to say; what an SSE stream says aside is in `out`
        already: a ping when nothing happened for ping_s seconds, a queue place, prefill
        progress."""
        if self.ping_s is not None:
            loop = asyncio.get_running_loop()
            self._active = loop.time()
            if self._ping is None:
                self._ping = loop.call_at(self._active + self.ping_s, self._ping_due, cursor)
        batch = await cursor.next()
        if not batch:
            out.append(self.ping)
        for event in batch:
            if isinstance(event, _ASIDE):
                return self._aside(batch, out)
        return batch  # the common batch (deltas): no copy

    def _aside(self, batch: list[Any], out: list[bytes]) -> list[Any]:
        events: list[Any] = []
        for event in batch:
            if isinstance(event, Queued):
                out.append(self._waiting(event))
            elif isinstance(event, Progress):
                out.append(self._progress(event))
            else:
                events.append(event)
        return events

    def _ping_due(self, cursor: Reading) -> None:
        assert self.ping_s is not None
        loop = asyncio.get_running_loop()
        due = self._active + self.ping_s
        if loop.time() >= due:
            self._ping = None
            cursor.wake()
        else:
            self._ping = loop.call_at(due, self._ping_due, cursor)


async def no_receive() -> Any:
    """The `receive` of a plain response sent from inside a door's: the race owns the
    real one."""
    raise RuntimeError("a plain response does not read the request")
