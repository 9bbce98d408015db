"""/ws: tokenpipe.v1 (JSON, multiplexed) when offered, else the article's plain-text mode.

One connection = one reader task (frames in) and one writer task (frames out), raced: the
first to end cancels the other. News from sessions is flushed once per event-loop turn and
connection, in one transport write, straight from a loop callback while the socket takes
data; when it is backed up, the writer task waits for it (up to the slow-client bound) and
the session merges what piles up meanwhile, so a slow client gets merged deltas instead of
a growing queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.protocol import State as WsState

from ..errors import BadRequest, DuplicateId, TokenpipeError, TooManyStreams, UnknownId
from ..protocol import ws as wire
from ..session import Cursor, Delta, Event, Failed, Finished, GenerationSession, Queued, Started
from ..types import GenerationRequest, Message, SamplingParams
from .runtime import SERVER_NAME, Runtime
from .security import check_handshake

log = logging.getLogger("tokenpipe.ws")
END_TEXT = "<|ENDTEXT|>"


async def websocket_endpoint(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    offered = list(websocket.scope.get("subprotocols") or [])
    if not await check_handshake(websocket, runtime, offered):
        return
    client = websocket.client.host if websocket.client else "unknown"
    limit = runtime.settings.max_connections_per_client
    if runtime.per_client.get(client, 0) >= limit:
        await _refuse_busy(websocket, wire.PROTOCOL in offered, limit)
        return
    runtime.per_client[client] = runtime.per_client.get(client, 0) + 1
    protocol = "tokenpipe.v1" if wire.PROTOCOL in offered else "plain"
    runtime.metrics.connections.labels(protocol).inc()
    try:
        if wire.PROTOCOL in offered:
            await JsonConnection(websocket, runtime).run()
        elif not any(not p.startswith("tokenpipe.bearer.") for p in offered):
            await PlainConnection(websocket, runtime).run()
        else:
            await websocket.close(code=1002,
                                  reason=f"unsupported subprotocol; offer {wire.PROTOCOL}")
    finally:
        runtime.metrics.connections.labels(protocol).dec()
        runtime.per_client[client] -= 1
        if not runtime.per_client[client]:
            del runtime.per_client[client]


async def _refuse_busy(websocket: WebSocket, json_mode: bool, limit: int) -> None:
    """Too many connections from one address: say so in a frame, then close 1013."""
    await websocket.accept(subprotocol=wire.PROTOCOL if json_mode else None)
    message = f"at most {limit} connections per client address; close one and retry"
    if json_mode:
        await websocket.send_text(wire.dumps(wire.error("rate_limited", message,
                                                        retry_after_ms=1000)))
    await websocket.close(code=1013, reason="too many connections from this address")


@dataclass
class _Stream:
    session: GenerationSession
    cursor: Cursor
    id_json: str  # the stream id, JSON-encoded once

    def frame(self, stream_id: str, event: Event) -> str:
        """The event's frame as JSON text; a delta (nearly every frame) without a dict."""
        if isinstance(event, Delta):
            return (f'{{"type":"delta","id":{self.id_json},"seq":{event.seq},'
                    f'"text":{encode_basestring(event.text)}}}')
        return wire.dumps(event_frame(stream_id, event))


RAW_SEND = "tokenpipe.raw_send"  # scope key: the server's own ASGI send (see app.py)


class FrameSink:
    """Writes text frames to one client.

    On uvicorn's websockets-sansio protocol (what `tokenpipe serve` runs) frames go
    straight into its websockets connection and out in one transport write per batch,
    without a coroutine per frame; anywhere else (test clients, other servers) through the
    ASGI send, one frame at a time.
    """

    def __init__(self, websocket: WebSocket) -> None:
        self.ws = websocket
        scope = getattr(websocket, "scope", None) or {}
        proto = getattr(scope.get(RAW_SEND), "__self__", None)
        self.proto: Any = proto if _is_sansio(proto) else None

    @property
    def direct(self) -> bool:
        return self.proto is not None

    def ready(self) -> bool:
        """True when a direct write would not queue behind data the client has not read."""
        return self.proto is not None and bool(self.proto.writable.is_set())

    def write_now(self, texts: list[str]) -> None:
        """Direct path only; frames to a connection that is gone are dropped (its reader
        sees the disconnect and ends the connection)."""
        proto = self.proto
        conn = proto.conn
        if (proto.disconnected or proto.close_sent or proto.transport.is_closing()
                or conn.state is not WsState.OPEN):
            return
        parts: list[bytes] = conn.data_to_send()  # empty: uvicorn flushes its own sends
        for text in texts:
            data = text.encode()
            parts.append(_text_header(len(data)))
            parts.append(data)
        proto.transport.write(b"".join(parts))

    async def write(self, texts: list[str], deadline_s: float) -> None:
        """Raises TimeoutError when the client has not taken data for `deadline_s`."""
        if self.proto is None:
            async with asyncio.timeout(deadline_s):  # one deadline per batch, not per frame
                for text in texts:
                    await self.ws.send_text(text)
            return
        if not self.proto.writable.is_set():
            async with asyncio.timeout(deadline_s):
                await self.proto.writable.wait()
        self.write_now(texts)


_SHORT_HEADERS = [bytes((0x81, n)) for n in range(126)]


def _text_header(n: int) -> bytes:
    """RFC 6455 header of a final, unmasked text frame of n payload bytes (server side)."""
    if n < 126:
        return _SHORT_HEADERS[n]
    if n < 65536:
        return b"\x81\x7e" + n.to_bytes(2, "big")
    return b"\x81\x7f" + n.to_bytes(8, "big")


def _is_sansio(proto: object) -> bool:
    try:
        from uvicorn.protocols.websockets.websockets_sansio_impl import (
            WebSocketsSansIOProtocol,
        )
    except ImportError:  # pragma: no cover - another uvicorn
        return False
    return (isinstance(proto, WebSocketsSansIOProtocol)
            and all(hasattr(proto, a) for a in ("conn", "transport", "writable",
                                                 "disconnected", "close_sent"))
            and not proto.conn.extensions)  # frames are written as they are: no deflate


async def _race(*coros: Any) -> None:
    """Runs the coroutines until the first ends; cancels the rest; re-raises its error."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, WebSocketDisconnect | ConnectionError):
                raise exc


def event_frame(stream_id: str, event: Event) -> dict[str, Any]:
    if isinstance(event, Delta):
        return {"type": "delta", "id": stream_id, "seq": event.seq, "text": event.text}
    if isinstance(event, Queued):
        return {"type": "queued", "id": stream_id, "position": event.position}
    if isinstance(event, Started):
        frame: dict[str, Any] = {"type": "start", "id": stream_id, "model": event.model,
                                 "prompt_tokens": event.prompt_tokens}
        if event.stream is not None:
            frame["stream"] = event.stream
        return frame
    if isinstance(event, Finished):
        t = event.timing
        return {
            "type": "end",
            "id": stream_id,
            "finish_reason": event.reason.value,
            "usage": {"prompt_tokens": event.usage.prompt_tokens,
                      "completion_tokens": event.usage.completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": event.usage.cached_tokens},
                      "completion_tokens_details": {"reasoning_tokens": 0}},
            "timing": {"queue_ms": t.queue_ms, "ttft_ms": t.ttft_ms, "total_ms": t.total_ms,
                       "tokens_per_s": t.tokens_per_s},
        }
    e = event.error
    return wire.error(e.code, e.message, stream_id, e.retry_after_ms)


class TokenBucket:
    """`rate` frames per second on average, bursts up to twice that."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, 2 * rate)
        self.tokens = self.capacity
        self.stamp = time.monotonic()

    def take(self) -> float:
        """0 if a frame may pass now, else the seconds until one may."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class JsonConnection:
    def __init__(self, websocket: WebSocket, runtime: Runtime) -> None:
        self.ws = websocket
        self.runtime = runtime
        self.settings = runtime.settings
        self.streams: dict[str, _Stream] = {}
        self.outbox: deque[dict[str, Any]] = deque()
        self.dirty: dict[str, None] = {}  # ordered set of stream ids with news
        self.sink = FrameSink(websocket)
        self.loop = asyncio.get_running_loop()
        self.kicked = False  # a flush is scheduled for this loop turn
        self.wake = asyncio.Event()
        self.sending = False  # the writer holds frames it has taken but not yet sent
        self.settled = asyncio.Event()  # set when the writer has nothing left to send
        self.dropped = False  # the client stopped reading and was let go

    async def run(self) -> None:
        await self.ws.accept(subprotocol=wire.PROTOCOL)
        self.send(wire.hello(SERVER_NAME, self.runtime.models, self.runtime.limits()))
        self.runtime.connections.add(self)
        try:
            await _race(self._reader(), self._writer())
        finally:
            self.runtime.connections.discard(self)
            for stream_id, stream in list(self.streams.items()):
                self._release(stream_id, stream, connection_lost=True)
            if not self.dropped:  # a close would wait forever behind unread data
                with contextlib.suppress(Exception):
                    await self.ws.close()

    async def close_when_flushed(self, code: int, deadline_s: float = 5.0) -> None:
        """Closes the socket once every stream on it has sent its final frame."""
        if self.streams or self.outbox or self.dirty or self.sending:
            self.settled.clear()
            self.wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled.wait(), deadline_s)
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, reason="server shutting down")

    def send(self, frame: dict[str, Any]) -> None:
        """Queues a frame that is not a session event (hello, pong, rejected frames)."""
        if frame["type"] == "error":
            self.runtime.metrics.errors.labels(frame["code"]).inc()
        self.outbox.append(frame)
        self._kick()

    def _mark(self, stream_id: str) -> None:
        self.dirty[stream_id] = None
        self._kick()

    def _kick(self) -> None:
        if not self.sink.direct:
            self.wake.set()
        elif not self.kicked:
            self.kicked = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Once per loop turn with news: everything pending, in one write, unless the
        socket is backed up (or the writer is busy): then the writer task takes over."""
        self.kicked = False
        if self.sending or not self.sink.ready():
            self.wake.set()
            return
        texts = self._collect(merge=False)
        if texts:
            self.sink.write_now(texts)
        if not self.streams:
            self.settled.set()

    def _collect(self, merge: bool) -> list[str]:
        """Every pending frame as text, in order; streams that sent their final frame end.
        `merge`: the socket was backed up, so each stream's pending text goes as one delta."""
        texts = [wire.dumps(frame) for frame in self.outbox]
        self.outbox.clear()
        dirty = list(self.dirty)
        self.dirty.clear()
        for stream_id in dirty:
            stream = self.streams.get(stream_id)
            if stream is None:
                continue
            texts.extend(stream.frame(stream_id, e) for e in stream.cursor.poll(merge))
            if stream.cursor.finished:
                self._release(stream_id, stream, connection_lost=False)
        return texts

    def _release(self, stream_id: str, stream: _Stream, *, connection_lost: bool) -> None:
        self.streams.pop(stream_id, None)
        session = stream.session
        if session.resumable:
            if connection_lost or session.final is not None:
                self.runtime.orphan(session)  # kept for the grace period, then forgotten
        elif connection_lost:
            session.attach(None)
            session.cancel()

    # ---- frames in ----------------------------------------------------------------------
    async def _reader(self) -> None:
        limit = self.settings.max_message_bytes
        bucket = TokenBucket(self.settings.max_frames_per_second)
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            wait_s = bucket.take()
            if wait_s > 0:
                self.send(wire.error("rate_limited", "too many frames per second; this frame "
                                     "was not processed", retry_after_ms=int(wait_s * 1000) + 1))
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
                self._handle(frame)
            except TokenpipeError as exc:
                sid = getattr(exc, "stream_id", None) or wire.frame_id(text)
                if sid in self.streams and exc.code not in ("duplicate_id", "unknown_id"):
                    sid = None  # an error naming a running generation would end it
                self.send(wire.error(exc.code, exc.message, sid, exc.retry_after_ms))

    def _handle(self, frame: wire.ClientFrame) -> None:
        if isinstance(frame, wire.Generate):
            self._generate(frame)
        elif isinstance(frame, wire.Cancel):
            stream = self.streams.get(frame.id)
            if stream is None:
                raise UnknownId(f"no running generation with id {frame.id!r}")
            stream.session.cancel()
        elif isinstance(frame, wire.Ping):
            self.send({"type": "pong", "data": frame.data})
        else:
            self._resume(frame)

    def _generate(self, frame: wire.Generate) -> None:
        if frame.id in self.streams:
            raise DuplicateId(f"id {frame.id!r} is already running on this connection")
        if len(self.streams) >= self.settings.max_streams_per_connection:
            raise TooManyStreams(
                f"at most {self.settings.max_streams_per_connection} generations per connection"
            )
        scheduler = self.runtime.require(frame.model)
        limit = scheduler.engine.info.context_tokens - 1
        max_tokens = frame.params.max_tokens
        if max_tokens is not None and max_tokens > limit:
            raise BadRequest(
                f"field 'params.max_tokens': {max_tokens} exceeds limits.max_tokens "
                f"({limit})", param="params.max_tokens")
        session = scheduler.submit(frame.to_request(), resumable=frame.resumable)
        session.client_id = frame.id
        if session.resumable:
            self.runtime.keep(session)
        self._adopt(frame.id, session, session.cursor())

    def _resume(self, frame: wire.Resume) -> None:
        session = self.runtime.adopt(frame.stream)
        if session is None:
            raise UnknownId("no resumable generation for that stream token (expired or unknown)")
        stream_id = frame.id or session.client_id or "resumed"
        if stream_id in self.streams and self.streams[stream_id].session is not session:
            raise DuplicateId(f"id {stream_id!r} is already running on this connection")
        previous = session.owner
        if isinstance(previous, JsonConnection) and previous is not self:
            previous.moved(session)
        try:
            cursor = session.cursor(frame.after_seq)
        except ValueError as exc:
            raise BadRequest(str(exc), param="after_seq") from None
        self._adopt(stream_id, session, cursor)

    def _adopt(self, stream_id: str, session: GenerationSession, cursor: Cursor) -> None:
        self.streams[stream_id] = _Stream(session, cursor, encode_basestring(stream_id))
        session.owner = self
        session.client_id = stream_id
        session.attach(lambda: self._mark(stream_id))
        self._mark(stream_id)

    def moved(self, session: GenerationSession) -> None:
        """A resume on another connection took `session` over."""
        for stream_id, stream in list(self.streams.items()):
            if stream.session is session:
                self.streams.pop(stream_id)
                self.send(wire.error("moved", "a resume from another connection took this "
                                     "generation over", stream_id))

    # ---- frames out ---------------------------------------------------------------------
    async def _writer(self) -> None:
        timeout = self.settings.slow_client_timeout_s
        while True:
            await self.wake.wait()
            self.wake.clear()
            self.sending = True
            while self.outbox or self.dirty:
                texts = self._collect(merge=True)
                try:
                    await self.sink.write(texts, timeout)
                except TimeoutError:
                    log.warning("client stopped reading for %.0f s; dropping it", timeout)
                    self.dropped = True
                    # The close frame waits behind the data the client does not read: try
                    # briefly, then let the connection go (its generations are cancelled).
                    with contextlib.suppress(TimeoutError, Exception):
                        await asyncio.wait_for(
                            self.ws.close(code=1008, reason="client too slow"), 1.0)
                    return
            self.sending = False
            if not self.streams:
                self.settled.set()


class PlainConnection:
    """The original article's protocol: a text frame in is one user message; text frames
    of the answer out, then exactly END_TEXT."""

    def __init__(self, websocket: WebSocket, runtime: Runtime) -> None:
        self.ws = websocket
        self.runtime = runtime
        self.inbox: asyncio.Queue[str] = asyncio.Queue()

    async def run(self) -> None:
        await self.ws.accept()
        self.runtime.connections.add(self)
        self.busy = False
        self.idle = asyncio.Event()
        try:
            await _race(self._reader(), self._answer_all())
        finally:
            self.runtime.connections.discard(self)
            with contextlib.suppress(Exception):
                await self.ws.close()

    async def close_when_flushed(self, code: int, deadline_s: float = 5.0) -> None:
        if self.busy:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.idle.wait(), deadline_s)
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, reason="server shutting down")

    async def _reader(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", errors="replace")
            await self.inbox.put(text)

    async def _answer_all(self) -> None:
        while True:
            text = await self.inbox.get()
            self.busy = True
            self.idle.clear()
            try:
                await self._answer(text)
            finally:
                self.busy = False
                self.idle.set()

    async def _answer(self, text: str) -> None:
        session: GenerationSession | None = None
        try:
            if not text.strip():
                raise BadRequest("empty message")
            if len(text.encode()) > self.runtime.settings.max_message_bytes:
                raise BadRequest("message exceeds max_message_bytes")
            request = GenerationRequest(messages=(Message("user", text),), params=SamplingParams())
            session = self.runtime.require().submit(request)
            async for event in session.events():
                if isinstance(event, Delta):
                    await self.ws.send_text(event.text)
                elif isinstance(event, Failed):
                    await self.ws.send_text(f"\n[error {event.error.code}: {event.error.message}]")
        except TokenpipeError as exc:
            await self.ws.send_text(f"[error {exc.code}: {exc.message}]")
        finally:
            if session is not None and session.final is None:
                session.cancel()
        await self.ws.send_text(END_TEXT)

