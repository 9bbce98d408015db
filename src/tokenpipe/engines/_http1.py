"""A small HTTP/1.1 client for the openai engine's streamed requests to its upstream.

Why not httpx here: each request through httpx, httpcore, anyio and h11 cost the proxy
about 1 ms more before its bytes left and after the answer's first bytes came back, sent
head and body in two writes, and passed each streamed chunk through four layers of async
iterators. This client is an asyncio Protocol: the request goes out in one write, the
response is parsed as it arrives (status line, headers, then Content-Length, chunked or
close-delimited body), and the reader gets every body byte received so far in one call,
however many chunks the network delivered at once. A one-token answer from an instant
upstream took the engine 0.56 to 0.60 ms this way, 1.5 to 2.1 ms through httpx
(docs/deployment.md has the rest).

Only what the engine needs: keep-alive connections pooled per origin (a pooled connection
the server has since closed is never reused, and one that fails before any answer byte
is retried once on a new connection), TLS through an ssl.SSLContext, no redirects, no
proxies, no compression (the engine asks for none), no HTTP/2.

Spare connections: llama.cpp's llama-server closes the connection after every streamed
answer (whatever its Keep-Alive header says), so each request would open a new one on
its critical path: 8 simultaneous requests reached it spread over several milliseconds,
and some of them started one decode step later. A connection that cannot be reused after
its answer is therefore replaced in the background, and so is a pooled one the server
closed for idleness while the origin is in use (SPARE_RECENT_S), up to max_idle.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
SPARE_CONNECT_TIMEOUT_S = 5.0
SPARE_RECENT_S = 60.0  # replace idle connections the server closed within this of a request
SPARE_MIN_LIFE_S = 1.0  # ...if they served a request or lived this long (so a server that
#                         hangs up on every new connection never starts a connect loop)
HIGH_WATER = 256 * 1024  # body bytes buffered before the socket stops being read


class HTTPError(Exception):
    """Any failure of the transport or of the upstream's HTTP framing (the names follow
    httpx's, which the engine's messages and logs used before)."""


class ConnectError(HTTPError):
    """The connection could not be made (refused, unreachable, TLS handshake, timeout)."""


class RemoteProtocolError(HTTPError):
    """The upstream closed the connection mid-answer or broke HTTP/1.1's framing."""


class WriteError(HTTPError):
    """The request could not be sent."""


class Origin:
    """scheme://host:port of one upstream, with its pool of idle keep-alive connections."""

    def __init__(self, base_url: str, ssl_context: ssl.SSLContext | None = None,
                 max_idle: int = 16, spares: bool = True) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        default_port = self.port == (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.prefix = parts.path.rstrip("/")
        self.ssl_context = ssl_context if self.tls else None
        if self.tls and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        self.max_idle = max_idle
        self.spares = spares
        self._idle: list[Connection] = []
        self._connecting: set[asyncio.Task[None]] = set()
        self._last_request = float("-inf")  # loop time
        self._closed = False

    def encode(self, method: str, path: str, body: bytes = b"",
               headers: Mapping[str, str] | None = None) -> bytes:
        """The request's bytes: head and body, written in one go."""
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"host: {self.host_header}",
                f"content-length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body

    def send_now(self, data: bytes) -> Connection | None:
        """Writes an encoded request on an idle connection at once, without awaiting
        anything: None when no idle connection is ready (request() then connects). The
        caller passes the connection to request(sent=...) for the answer, or closes it."""
        self._last_request = asyncio.get_running_loop().time()
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable():
                conn.send(data)
                return conn
            conn.close()
        return None

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: Mapping[str, str] | None = None,
                      connect_timeout_s: float | None = None,
                      sent: Connection | None = None) -> Connection:
        """Sends the request; returns the connection once the response's head arrived.
        The caller reads the body, then calls release() (or close(), to abandon it).
        `sent`: the connection send_now() already wrote this request on."""
        data = b"" if sent is not None else self.encode(method, path, body, headers)
        self._last_request = asyncio.get_running_loop().time()
        if sent is None and not self._idle and self._connecting:
            # a spare is on its way: sooner than a new connection
            await asyncio.wait(set(self._connecting), timeout=connect_timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        while sent is not None or self._idle:
            conn = sent if sent is not None else self._idle.pop()
            if sent is None:
                if not conn.reusable():
                    conn.close()
                    continue
                conn.send(data)
            sent = None
            try:
                await conn.receive_head()
                return conn
            except HTTPError:
                conn.close()
                if conn.received_any:
                    raise
                # The server closed the idle connection as we reused it, before reading
                # our request: nothing was processed, so a fresh connection may send it.
                data = data or self.encode(method, path, body, headers)
            except BaseException:  # cancelled while the upstream had not answered yet:
                conn.close()  # closing is how it learns to drop the request
                raise
        conn = await self._connect(connect_timeout_s)
        try:
            conn.send(data)
            await conn.receive_head()
        except BaseException:
            conn.close()
            raise
        return conn

    async def _connect(self, timeout_s: float | None) -> Connection:
        loop = asyncio.get_running_loop()
        conn = Connection(self)
        try:
            async with asyncio.timeout(timeout_s):
                transport, _ = await loop.create_connection(
                    lambda: conn, self.host, self.port, ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context else None)
            # in case connection_made has not run yet (uvloop calls it from a callback)
            conn.transport = conn.transport or transport
        except TimeoutError:
            raise ConnectError(f"connecting to {self.host}:{self.port} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(str(exc) or type(exc).__name__) from None
        return conn

    def _keep(self, conn: Connection) -> None:
        if len(self._idle) < self.max_idle and conn.reusable():
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.append(conn)
        else:
            conn.close()

    def _replace(self) -> None:
        """Opens a spare connection in the background (see the module's docstring)."""
        if (not self.spares or self._closed
                or len(self._idle) + len(self._connecting) >= self.max_idle):
            return
        task = asyncio.get_running_loop().create_task(self._spare())
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _spare(self) -> None:
        try:
            conn = await self._connect(SPARE_CONNECT_TIMEOUT_S)
        except HTTPError:
            return  # the next request connects (and reports the failure) itself
        if self._closed:
            conn.close()
        else:
            self._keep(conn)

    def _idle_closed(self, conn: Connection) -> None:
        """The server closed a pooled connection (its keep-alive timeout)."""
        if conn not in self._idle:
            return
        self._idle.remove(conn)
        now = asyncio.get_running_loop().time()
        if now - self._last_request < SPARE_RECENT_S and (
                conn.served or now - conn.idle_since >= SPARE_MIN_LIFE_S):
            self._replace()

    def close(self) -> None:
        self._closed = True
        for task in list(self._connecting):
            task.cancel()
        while self._idle:
            self._idle.pop().close()


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection carrying one request at a time."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}  # lower-case names; repeated ones joined by ", "
        self.received_any = False  # a byte of this request's response arrived
        self.idle_since = 0.0  # loop time it went back to the pool
        self.served = False  # it carried a request (a spare that never did is not replaced)
        self._buf = bytearray()  # received, not yet parsed
        self._body = bytearray()  # parsed body bytes, not yet read
        self._state = "idle"  # idle, head, body, done
        self._framing = ""  # length, chunked, close
        self._remaining = 0  # body bytes left (length) or of the current chunk (chunked)
        self._chunk_state = "size"  # size, data, data_end, trailer
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

    def data_received(self, data: bytes) -> None:
        if self._state == "idle":  # bytes nobody asked for: the connection is unusable
            self._keep_alive = False
            return
        self.received_any = True
        self._buf += data
        try:
            self._parse()
        except HTTPError as exc:
            self._fail(exc)
            return
        if len(self._body) > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        if self._state == "body" and self._framing == "close":
            self._state = "done"
            self._keep_alive = False
        elif self._state in ("head", "body"):
            self._fail(RemoteProtocolError(
                "the upstream closed the connection before the answer ended"
                if self.received_any else
                "the upstream closed the connection without sending a response"))
        self._keep_alive = False
        self._wake()
        if self._state == "idle":
            self.origin._idle_closed(self)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._keep_alive = False
        if self._state == "body" and self._framing == "close" and exc is None:
            self._state = "done"  # a close-delimited body ends with its connection
        elif self._state in ("head", "body"):
            self._fail(RemoteProtocolError(
                f"the connection was lost: {exc}" if exc else
                "the upstream closed the connection before the answer ended"))
        self._wake()
        if self._state == "idle":
            self.origin._idle_closed(self)

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
        if self._state == "done" and self._keep_alive and not self._buf:
            self._disarm()
            self._state = "idle"
            self.origin._keep(self)
        else:
            self.close()
            self.origin._replace()  # the next request should not wait for a connect

    def close(self) -> None:
        self._keep_alive = False
        self._disarm()
        if self.transport is not None:
            self.transport.close()  # an unread answer: the upstream sees its client leave

    # ---- parsing ------------------------------------------------------------------------
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

    def _parse(self) -> None:
        while True:
            if self._state == "head":
                if not self._parse_head():
                    return
            elif self._state == "body":
                if not self._parse_body():
                    return
            else:
                if self._buf and self._state == "done":
                    self._keep_alive = False  # bytes after the answer: do not reuse
                return

    def _parse_head(self) -> bool:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD_BYTES:
                raise RemoteProtocolError("the response head is too large")
            return False
        lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        del self._buf[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise RemoteProtocolError(f"not an HTTP/1.x response: {lines[0][:100]!r}")
        status = int(code)
        if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
            return True
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise RemoteProtocolError(f"malformed response header: {line[:100]!r}")
            name = name.strip().lower()
            value = value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.status, self.reason, self.headers = status, reason, headers
        connection = headers.get("connection", "").lower()
        self._keep_alive = self._keep_alive and (
            "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection)
        self._state = "body"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing, self._chunk_state = "chunked", "size"
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"].split(",")[0])
            except ValueError:
                raise RemoteProtocolError("invalid Content-Length") from None
            self._framing = "length"
            if self._remaining == 0:
                self._state = "done"
        elif status in (204, 304):
            self._framing, self._state = "length", "done"
        else:
            self._framing = "close"
            self._keep_alive = False
        return True

    def _parse_body(self) -> bool:
        if self._framing == "close":
            self._body += self._buf
            self._buf.clear()
            return False
        if self._framing == "length":
            take = min(self._remaining, len(self._buf))
            self._body += self._buf[:take]
            del self._buf[:take]
            self._remaining -= take
            if self._remaining == 0:
                self._state = "done"
                return True
            return False
        return self._parse_chunked()

    def _parse_chunked(self) -> bool:
        buf = self._buf
        while True:
            if self._chunk_state == "data":
                if not buf:
                    return False
                take = min(self._remaining, len(buf))
                self._body += buf[:take]
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    return False
                self._chunk_state = "data_end"
            elif self._chunk_state == "data_end":
                if len(buf) < 2:
                    return False
                if buf[:2] != b"\r\n":
                    raise RemoteProtocolError("a chunk does not end with CRLF")
                del buf[:2]
                self._chunk_state = "size"
            elif self._chunk_state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise RemoteProtocolError("a chunk size line is too long")
                    return False
                size_text = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    self._remaining = int(size_text, 16)
                except ValueError:
                    raise RemoteProtocolError(f"invalid chunk size {size_text[:20]!r}") from None
                self._chunk_state = "data" if self._remaining else "trailer"
            else:  # trailer: header lines up to an empty one, all ignored
                end = buf.find(b"\r\n")
                if end < 0:
                    return False
                del buf[: end + 2]
                if end == 0:
                    self._state = "done"
                    return True

