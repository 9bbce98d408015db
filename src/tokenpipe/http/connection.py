"""One HTTP/1.1 connection carrying one request at a time: an asyncio Protocol whose
response is parsed by httptools (llhttp, the parser under uvicorn's server side) as it
arrives, read into one buffer of the connection's own (a BufferedProtocol: a plain Protocol
gets a fresh 256 KiB bytes object per read, which glibc mapped and unmapped each time,
1.3 ms of kernel time per 64-token bench stream). The reader gets every body byte received
so far in one call, however many chunks the network delivered at once; a slow reader stops
the socket being read (HIGH_WATER) instead of buffering without end.

Framing is llhttp's: Content-Length, chunked (trailers ignored), close-delimited, 1xx
answers skipped, keep-alive by version and Connection header. Bytes after a complete answer,
or bytes nobody asked for, make the connection unusable for another request.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

import httptools

from .errors import HTTPError, RemoteProtocolError, WriteError

MAX_HEAD_BYTES = 64 * 1024  # of an answer's head still incomplete: the server is not HTTP
HIGH_WATER = 256 * 1024  # body bytes buffered before the socket stops being read
READ_BYTES = 64 * 1024  # the most one read of the socket takes


class Pool(Protocol):
    """What a connection tells the pool it came from (client.Origin)."""

    def keep(self, conn: Connection) -> None:
        """A completely read answer: the connection may carry the next request."""

    def replace(self) -> None:
        """A connection closed after its answer: a spare may take its place."""

    def idle_closed(self, conn: Connection) -> None:
        """The server closed a connection while it waited in the pool."""


class _AfterAnswer(Exception):
    """Stops the parser at bytes that follow a complete answer (they answer nothing)."""


class Connection(asyncio.BufferedProtocol):
    """One HTTP/1.1 connection carrying one request at a time."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}  # lower-case names; repeated ones joined by ", "
        self.received_any = False  # a byte of this request's response arrived
        self.idle_since = 0.0  # loop time it went back to the pool
        self.served = False  # it carried a request (a spare that never did is not replaced)
        self._parser = httptools.HttpResponseParser(self)
        self._read = memoryview(bytearray(READ_BYTES))  # what the socket reads into
        self._body = bytearray()  # parsed body bytes, not yet read
        self._state = "idle"  # idle, head, body, done
        self._close_delimited = False  # the body ends with the connection
        self._head_bytes = 0  # received while the head was incomplete
        self._keep_alive = True
        self._lost = False
        self._error: HTTPError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None  # the idle timeout of receive()
        self._since = 0.0  # loop time the current wait began
        self._idle_s = 0.0

    # ---- asyncio callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read

    def buffer_updated(self, nbytes: int) -> None:
        data = self._read[:nbytes]  # parsed before the next read: on_body copies what it keeps
        if self._state in ("idle", "done"):  # bytes that answer nothing: not reusable
            self._keep_alive = False
            return
        self.received_any = True
        in_head = self._state == "head"
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self._state != "done":  # (after a complete answer: only not reusable)
                self._fail(RemoteProtocolError(f"the server broke HTTP/1.1: {exc}"))
                return
            self._keep_alive = False
        if in_head and self._state == "head":
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._fail(RemoteProtocolError("the response head is too large"))
                return
        if len(self._body) > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self._ended("the server closed the connection before the answer ended"
                    if self.received_any else
                    "the server closed the connection without sending a response")
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._ended(f"the connection was lost: {exc}" if exc else
                    "the server closed the connection before the answer ended", exc is None)

    # ---- httptools callbacks ------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._state == "done":
            raise _AfterAnswer

    def on_status(self, reason: bytes) -> None:
        self.reason = reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._state != "head":
            return  # a chunked body's trailer
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
            return
        self.status = status
        self._keep_alive = self._keep_alive and self._parser.should_keep_alive()
        self._close_delimited = (
            "chunked" not in self.headers.get("transfer-encoding", "").lower()
            and "content-length" not in self.headers and status not in (204, 304))
        self._state = "body"

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        if self._state == "head":  # the end of a 1xx answer
            self.reason, self.headers = "", {}
        else:
            self._state = "done"

    # ---- the caller's side ----------------------------------------------------------------
    def reusable(self) -> bool:
        return (self._keep_alive and not self._lost and self._state == "idle"
                and self.transport is not None and not self.transport.is_closing())

    def send(self, data: bytes) -> None:
        """Writes the request (the transport buffers what the socket cannot take yet; its
        answer is what the caller waits for next)."""
        if self.transport is None or self.transport.is_closing():
            raise WriteError("the connection is closed")
        self._state = "head"
        self.served = True
        self.received_any = False
        self.status, self.reason, self.headers = 0, "", {}
        self._body.clear()
        self._close_delimited = False
        self._head_bytes = 0
        self._error = None
        self.transport.write(data)

    async def receive_head(self) -> None:
        while self._state == "head":
            await self._wait()

    async def receive(self, idle_s: float | None = None) -> bytes | None:
        """The body bytes received since the last call; None once the body has ended.
        TimeoutError when nothing came for idle_s seconds."""
        while not self._body:
            if self._state == "done":
                return None
            await self._wait(idle_s)
        data = bytes(self._body)
        self._body.clear()
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def read(self) -> bytes:
        chunks = []
        while (data := await self.receive()) is not None:
            chunks.append(data)
        return b"".join(chunks)

    def release(self) -> None:
        """The caller is done: a completely read answer leaves the connection to the pool."""
        if self._state == "done" and self._keep_alive and not self._body:
            self._disarm()
            self._state = "idle"
            self.pool.keep(self)
        else:
            self.close()
            self.pool.replace()  # the next request should not wait for a connect

    def close(self) -> None:
        self._keep_alive = False
        self._disarm()
        if self.transport is not None:
            self.transport.close()  # an unread answer: the upstream sees its client leave

    # ---- waiting ------------------------------------------------------------------------
    def _ended(self, why: str, clean: bool = True) -> None:
        """The server closed its side (clean), or the connection is gone."""
        self._keep_alive = False
        if self._state == "body" and self._close_delimited and clean:
            self._state = "done"  # a close-delimited body ends with its connection
        elif self._state in ("head", "body"):
            self._fail(RemoteProtocolError(why))
        self._wake()
        if self._state == "idle":
            self.pool.idle_closed(self)

    async def _wait(self, idle_s: float | None = None) -> None:
        if self._error is not None:
            raise self._error
        if self._lost:
            raise RemoteProtocolError("the connection is closed")
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        if idle_s is not None:
            # One timer per connection, moved on lazily: a wait costs a clock read, not a
            # timer of its own (this runs once per streamed token).
            self._since, self._idle_s = loop.time(), idle_s
            if self._timer is None:
                self._timer = loop.call_at(self._since + idle_s, self._idle_check)
        else:
            self._idle_s = 0.0
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def _idle_check(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done() or self._idle_s <= 0:
            self._timer = None  # nobody waits: the next wait arms it again
            return
        loop = asyncio.get_running_loop()
        due = self._since + self._idle_s
        if loop.time() >= due:
            self._timer = None
            waiter.set_exception(TimeoutError())
        else:
            self._timer = loop.call_at(due, self._idle_check)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: HTTPError) -> None:
        if self._error is None:
            self._error = error
        self._keep_alive = False
        if self.transport is not None:
            self.transport.close()
        self._wake()
