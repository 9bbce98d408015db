"""What every HTTP door's answer to one generation shares (OpenAI, Anthropic, Responses,
Ollama): an ASGI response whose status and headers wait for the session's first events;
the session's events raced against the client's leaving (race.py), so a client that goes
away cancels its generation at once; and the idle ping timer. A door subclasses it with
its own `_stream` (the wire format, event by event) and `_whole` (one object at the end).

The ping timer is armed once and moved on lazily: a token only notes its time, and the
timer, when it fires early, re-arms itself for the rest (no timer per token)."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..session import Cursor, Event, GenerationSession
from .race import http_disconnect, race

PING_INTERVAL_S = 15.0  # default of Settings.sse_ping_interval_s


class DoorResponse(Response):
    """One generation's answer: `_stream` when `stream`, else `_whole`. `progress`: the
    door's `_stream` says a long prompt's prefill progress (Progress events)."""

    progress = False

    def __init__(self, session: GenerationSession, *, stream: bool,
                 ping_s: float | None = PING_INTERVAL_S) -> None:
        self.session = session
        self.stream = stream
        self.ping_s = ping_s if ping_s else None  # 0 or None: no pings
        self._ping: asyncio.TimerHandle | None = None
        self._active = 0.0  # loop time of the last wait for events (pings: idle since)
        self._scope: Scope = {"type": "http"}
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._scope = scope
        cursor = self.session.cursor(progress=self.stream and self.progress)
        try:
            await race(self._stream(cursor, send) if self.stream else self._whole(cursor, send),
                       http_disconnect(receive), settle=False)  # it only reads receive
        except OSError:  # the client went away while we wrote
            pass
        finally:
            if self._ping is not None:
                self._ping.cancel()
            cursor.close()
            self.session.cancel()  # a no-op once it ended; else its client left: stop it
        if self.background is not None:
            await self.background()

    async def _stream(self, cursor: Cursor, send: Send) -> None:
        raise NotImplementedError

    async def _whole(self, cursor: Cursor, send: Send) -> None:
        raise NotImplementedError

    async def _events(self, cursor: Cursor) -> list[Event]:
        """The next events; an empty list when nothing happened for ping_s seconds."""
        if self.ping_s is not None:
            loop = asyncio.get_running_loop()
            self._active = loop.time()
            if self._ping is None:
                self._ping = loop.call_at(self._active + self.ping_s, self._ping_due, cursor)
        return await cursor.next()

    def _ping_due(self, cursor: Cursor) -> None:
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
