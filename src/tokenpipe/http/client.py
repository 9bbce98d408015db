"""A lean HTTP/1.1 client: one origin's pool of keep-alive connections, requests written in
one go, answers read as they arrive (connection.py).

Why not httpx: each request through httpx, httpcore, anyio and h11 cost the openai engine
about 1 ms more before its bytes left and after the answer's first bytes came back, sent
head and body in two writes, and passed each streamed chunk through four layers of async
iterators. A one-token answer from an instant upstream took the engine 0.56 to 0.60 ms
this way, 1.5 to 2.1 ms through httpx (docs/deployment.md has the rest); an httpx client
per stream also cost the bench about 40 ms of CPU each, most of it building a TLS context.

Only what its users need: keep-alive connections pooled per origin (a pooled connection
the server has since closed is never reused, and one that fails before any answer byte is
retried once on a new connection), TLS through an ssl.SSLContext, no redirects, no proxies,
no compression (nobody here asks for it), no HTTP/2.

Spare connections: llama.cpp's llama-server closes the connection after every streamed
answer (whatever its Keep-Alive header says), so each request would open a new one on its
critical path: 8 simultaneous requests reached it spread over several milliseconds, and
some of them started one decode step later. A connection that cannot be reused after its
answer is therefore replaced in the background, and so is a pooled one the server closed
for idleness while the origin is in use (SPARE_RECENT_S), up to max_idle.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from .connection import Connection
from .errors import ConnectError, HTTPError

SPARE_CONNECT_TIMEOUT_S = 5.0
SPARE_RECENT_S = 60.0  # replace idle connections the server closed within this of a request
SPARE_MIN_LIFE_S = 1.0  # ...if they served a request or lived this long (so a server that
#                         hangs up on every new connection never starts a connect loop)


@dataclass(frozen=True, slots=True)
class Response:
    """A whole answer, read to its end (Origin.fetch)."""

    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


class Origin:
    """scheme://host:port of one server, with its pool of idle keep-alive connections."""

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
            except BaseException:  # cancelled while the server had not answered yet:
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

    async def fetch(self, method: str, path: str, body: bytes = b"",
                    headers: Mapping[str, str] | None = None, *,
                    timeout_s: float) -> Response:
        """The whole answer to one request within timeout_s (TimeoutError past it): for
        health checks and listings, where nothing streams."""
        async with asyncio.timeout(timeout_s):
            conn = await self.request(method, path, body, headers, connect_timeout_s=timeout_s)
            try:
                data = await conn.read()
            finally:
                conn.release()
        return Response(conn.status, conn.headers, data)

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

    # ---- what connections tell their pool (connection.Pool) -------------------------------
    def keep(self, conn: Connection) -> None:
        if len(self._idle) < self.max_idle and conn.reusable():
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.append(conn)
        else:
            conn.close()

    def replace(self) -> None:
        """Opens a spare connection in the background (see the module's docstring)."""
        if (not self.spares or self._closed
                or len(self._idle) + len(self._connecting) >= self.max_idle):
            return
        task = asyncio.get_running_loop().create_task(self._spare())
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    def idle_closed(self, conn: Connection) -> None:
        """The server closed a pooled connection (its keep-alive timeout)."""
        if conn not in self._idle:
            return
        self._idle.remove(conn)
        now = asyncio.get_running_loop().time()
        if now - self._last_request < SPARE_RECENT_S and (
                conn.served or now - conn.idle_since >= SPARE_MIN_LIFE_S):
            self.replace()

    async def _spare(self) -> None:
        try:
            conn = await self._connect(SPARE_CONNECT_TIMEOUT_S)
        except HTTPError:
            return  # the next request connects (and reports the failure) itself
        if self._closed:
            conn.close()
        else:
            self.keep(conn)

    def close(self) -> None:
        self._closed = True
        for task in list(self._connecting):
            task.cancel()
        while self._idle:
            self._idle.pop().close()
