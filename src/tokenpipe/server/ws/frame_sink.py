"""Text frames out to one /ws client: straight into uvicorn's websockets-sansio connection
(one transport write per batch, no coroutine per frame) where the server runs it, else
through the ASGI send. A frame that cannot be encoded never takes the batch with it.

The fast path: measured, it spares a coroutine and a websockets send per frame (100
clients of the fake engine). `FrameSink.direct` says which path a connection took;
undoing it is `_is_sansio` answering False."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket
from websockets.protocol import State as WsState

log = logging.getLogger("tokenpipe.ws")
RAW_SEND = "tokenpipe.raw_send"  # scope key: the server's own ASGI send (KeepRawSend)
_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8(text: str) -> bytes:
    """UTF-8 of a frame; a lone surrogate (no encoder takes one) becomes U+FFFD, so that
    frame still goes out and its neighbours with it."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        log.warning("a frame held a lone surrogate; sent with U+FFFD in its place")
        return _SURROGATE.sub("\ufffd", text).encode()


def clean(text: str) -> str:
    """`text` with any lone surrogate as U+FFFD (for paths that encode it themselves)."""
    return text if text.isascii() else utf8(text).decode()


class FrameSink:
    """Writes text frames to one client.

    On uvicorn's websockets-sansio protocol (what `tokenpipe serve` runs) frames go
    straight into its websockets connection and out in one transport write per batch;
    anywhere else (test clients, other servers) through the ASGI send, one at a time.
    Relies on the protocol's attributes `conn`, `transport`, `writable`, `disconnected`
    and `close_sent`: private to uvicorn (pyproject pins uvicorn>=0.54,<0.55), checked in
    `_is_sansio`.
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
            data = utf8(text)
            parts.append(_text_header(len(data)))
            parts.append(data)
        proto.transport.write(b"".join(parts))

    async def write(self, texts: list[str], deadline_s: float) -> None:
        """Raises TimeoutError when the client has not taken data for `deadline_s`."""
        if self.proto is None:
            async with asyncio.timeout(deadline_s):  # one deadline per batch, not per frame
                for text in texts:
                    await self.ws.send_text(clean(text))
            return
        await self.drained(deadline_s)
        self.write_now(texts)

    async def drained(self, deadline_s: float) -> None:
        """Waits until the client has read enough that a write would not queue; raises
        TimeoutError after `deadline_s` (the ASGI path cannot tell: returns at once)."""
        if self.proto is not None and not self.proto.writable.is_set():
            async with asyncio.timeout(deadline_s):
                await self.proto.writable.wait()

    def abort(self) -> None:
        """Drops the connection now, unsent data and all (a close would wait behind data
        a client that stopped reading will never take)."""
        if self.proto is not None:  # also when closing: a close still flushing waits too
            self.proto.transport.abort()

    def abort_later(self, delay_s: float) -> None:
        """Aborts in `delay_s` unless the connection is gone by then (a no-op after)."""
        if self.proto is not None:
            asyncio.get_running_loop().call_later(delay_s, self.proto.transport.abort)


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


class KeepRawSend:
    """ASGI middleware: puts the server's own `send` into a WebSocket's scope before the
    framework wraps it, so that FrameSink can reach uvicorn's connection behind it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            scope[RAW_SEND] = send
        await self.app(scope, receive, send)
