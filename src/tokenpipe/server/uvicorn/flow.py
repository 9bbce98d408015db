"""`Flow`: the flow control of one /ws connection on tokenpipe's WebSocket protocol
(websocket.py), the one object a connection receives from this folder. It writes text
frames straight into the websockets-sansio connection (one transport write per batch, no
coroutine per frame), says when the client is backed up, and holds or stops reading.

Relies on the protocol's attributes `conn`, `transport`, `writable`, `disconnected` and
`close_sent` and on its own `frame_gate`, `stall_timeout_s`, `on_backed_up`,
`hold_reading` and `stop_reading` (websocket.py). `flow_of` answers None anywhere else
(test clients, other servers): the connection then writes through the ASGI send."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket
from websockets.protocol import State as WsState

from .websocket import TokenpipeWebSocketProtocol

RAW_SEND = "tokenpipe.raw_send"  # scope key: the server's own ASGI send (KeepRawSend)


class Flow:
    """One connection's direct path: frames out, the write buffer's state, reading."""

    def __init__(self, proto: TokenpipeWebSocketProtocol) -> None:
        self.proto = proto

    def ready(self) -> bool:
        """True when a direct write would not queue behind data the client has not read."""
        return self.proto.writable.is_set()

    def write_now(self, frames: list[bytes]) -> None:
        """Encoded text frames in one write; to a connection that is gone they are dropped
        (its reader sees the disconnect and ends the connection)."""
        proto = self.proto
        conn = proto.conn
        if (proto.disconnected or proto.close_sent or proto.transport.is_closing()
                or conn.state is not WsState.OPEN):
            return
        parts: list[bytes] = conn.data_to_send()  # empty: uvicorn flushes its own sends
        for data in frames:
            parts.append(_text_header(len(data)))
            parts.append(data)
        proto.transport.write(b"".join(parts))

    async def drained(self, deadline_s: float) -> None:
        """Waits until a write would not queue; TimeoutError after `deadline_s`."""
        if not self.proto.writable.is_set():
            async with asyncio.timeout(deadline_s):
                await self.proto.writable.wait()

    def abort(self) -> None:
        """Drops the connection now, unsent data and all."""
        self.proto.transport.abort()

    def abort_later(self, delay_s: float) -> None:
        asyncio.get_running_loop().call_later(delay_s, self.proto.transport.abort)

    def gate(self, admit: Callable[[], bool], stall_timeout_s: float,
             on_backed_up: Callable[[], None]) -> None:
        """Every frame the client sends, pings too, asks `admit`; backed up for
        `stall_timeout_s` the connection is aborted; `on_backed_up` hears each time the
        write buffer fills, whoever filled it."""
        self.proto.frame_gate = admit
        self.proto.stall_timeout_s = stall_timeout_s
        self.proto.on_backed_up = on_backed_up

    def ungate(self) -> None:
        self.proto.frame_gate = self.proto.on_backed_up = None

    def hold_reading(self, seconds: float) -> None:
        """Reads nothing for `seconds`: what the client sends waits in TCP, unparsed."""
        self.proto.hold_reading(seconds)

    def stop_reading(self) -> None:
        """Reads nothing more (the connection is being cut off)."""
        self.proto.stop_reading()


def flow_of(websocket: WebSocket) -> Flow | None:
    """The direct path of this WebSocket when tokenpipe's protocol serves it without
    compression (frames are written as they are), else None."""
    scope = getattr(websocket, "scope", None) or {}
    proto = getattr(scope.get(RAW_SEND), "__self__", None)
    if isinstance(proto, TokenpipeWebSocketProtocol) and not proto.conn.extensions:
        return Flow(proto)
    return None


_SHORT_HEADERS = [bytes((0x81, n)) for n in range(126)]


def _text_header(n: int) -> bytes:
    """RFC 6455 header of a final, unmasked text frame of n payload bytes (server side)."""
    if n < 126:
        return _SHORT_HEADERS[n]
    if n < 65536:
        return b"\x81\x7e" + n.to_bytes(2, "big")
    return b"\x81\x7f" + n.to_bytes(8, "big")


class KeepRawSend:
    """ASGI middleware: puts the server's own `send` into a WebSocket's scope before the
    framework wraps it, so that `flow_of` can reach uvicorn's connection behind it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            scope[RAW_SEND] = send
        await self.app(scope, receive, send)
