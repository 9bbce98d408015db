"""Text frames out to one /ws client, and its flow control: through uvicorn's connection
directly (`Flow`, server/uvicorn/flow.py: one transport write per batch, no coroutine per
frame) where tokenpipe's protocol runs it, else through the ASGI send, where holding or
stopping reading does nothing. A frame that cannot be encoded never takes the batch with
it.

The fast path: measured, it spares a coroutine and a websockets send per frame (100
clients of the fake engine). `FrameSink.direct` says which path a connection took;
undoing it is `flow_of` answering None."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

from starlette.websockets import WebSocket

from ..uvicorn.flow import flow_of

log = logging.getLogger("tokenpipe.ws")
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
    """Writes text frames to one client and controls how its frames are read: on
    tokenpipe's uvicorn protocol (what `tokenpipe serve` runs) through its `Flow`,
    anywhere else (test clients, other servers) through the ASGI send, one at a time."""

    def __init__(self, websocket: WebSocket) -> None:
        self.ws = websocket
        self.flow = flow_of(websocket)

    @property
    def direct(self) -> bool:
        return self.flow is not None

    def ready(self) -> bool:
        """True when a direct write would not queue behind data the client has not read."""
        return self.flow is not None and self.flow.ready()

    def write_now(self, texts: list[str]) -> None:
        """Direct path only; frames to a connection that is gone are dropped."""
        assert self.flow is not None
        self.flow.write_now([utf8(text) for text in texts])

    async def write(self, texts: list[str], deadline_s: float) -> None:
        """Raises TimeoutError when the client has not taken data for `deadline_s`."""
        if self.flow is None:
            async with asyncio.timeout(deadline_s):  # one deadline per batch, not per frame
                for text in texts:
                    await self.ws.send_text(clean(text))
            return
        await self.flow.drained(deadline_s)
        self.flow.write_now([utf8(text) for text in texts])

    async def drained(self, deadline_s: float) -> None:
        """Waits until the client has read enough that a write would not queue; raises
        TimeoutError after `deadline_s` (the ASGI path cannot tell: returns at once)."""
        if self.flow is not None:
            await self.flow.drained(deadline_s)

    def abort(self) -> None:
        """Drops the connection now, unsent data and all (a close would wait behind data
        a client that stopped reading will never take)."""
        if self.flow is not None:  # also when closing: a close still flushing waits too
            self.flow.abort()

    def abort_later(self, delay_s: float) -> None:
        """Aborts in `delay_s` unless the connection is gone by then (a no-op after)."""
        if self.flow is not None:
            self.flow.abort_later(delay_s)

    def gate(self, admit: Callable[[], bool], stall_timeout_s: float,
             on_backed_up: Callable[[], None]) -> None:
        """Control frames (pings) count in the frame budget too (Flow.gate)."""
        if self.flow is not None:
            self.flow.gate(admit, stall_timeout_s, on_backed_up)

    def ungate(self) -> None:
        if self.flow is not None:
            self.flow.ungate()

    def hold_reading(self, seconds: float) -> None:
        if self.flow is not None:
            self.flow.hold_reading(seconds)

    def stop_reading(self) -> None:
        if self.flow is not None:
            self.flow.stop_reading()
