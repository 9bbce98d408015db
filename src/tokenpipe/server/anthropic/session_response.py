"""Serving one Anthropic Messages request from its GenerationSession, as an ASGI response:
one JSON message, or Anthropic's named SSE events (protocol/anthropic/events.py), its
blocks (thinking, text, tool_use) following the session's channels.

As the OpenAI door's: the session's events race the client's disconnect (race.py), and a
generation whose client left is cancelled at once. Headers wait for the first thing worth
saying (the first text, the end, a failure, a queue position, a due ping), so a failure
before the first token is a proper status in Anthropic's shape; after it, one `error`
event ends the stream. A request waiting for capacity commits to 200 and hears
`: queued position=N` comment lines; an idle stream gets `event: ping` every ping_s
(SDKs skip both).
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ...errors import TokenpipeError
from ...protocol import sse
from ...protocol.anthropic.errors import error_body, status_of
from ...protocol.anthropic.events import PING, MessageRender
from ...session import Cursor, Delta, Event, Failed, Finished, GenerationSession, Queued
from ..race import http_disconnect, race

PING_INTERVAL_S = 15.0  # default of Settings.sse_ping_interval_s
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
]


def error_response(exc: TokenpipeError) -> Response:
    """`exc` as Anthropic's error JSON with its status (and Retry-After when it has one)."""
    headers = {}
    if exc.retry_after_ms is not None:
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_ms / 1000)))
        headers["retry-after-ms"] = str(exc.retry_after_ms)  # the anthropic SDK honours it
    return JSONResponse(error_body(exc), status_code=status_of(exc), headers=headers)


class SessionResponse(Response):
    """The ASGI response of one generation: SSE when `stream`, else one message."""

    def __init__(self, session: GenerationSession, *, stream: bool,
                 ping_s: float = PING_INTERVAL_S) -> None:
        self.session = session
        self.shape = MessageRender(session.model)
        self.stream = stream
        self.ping_s = ping_s if ping_s > 0 else None  # 0: no pings
        self._ping: asyncio.TimerHandle | None = None
        self._active = 0.0  # loop time of the last wait for events (pings: idle since)
        self._scope: Scope = {"type": "http"}
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._scope = scope
        cursor = self.session.cursor()
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

    def _ping_due(self, cursor: Cursor) -> None:
        """The ping timer: armed once, moved on lazily (a token only notes its time)."""
        assert self.ping_s is not None
        loop = asyncio.get_running_loop()
        due = self._active + self.ping_s
        if loop.time() >= due:
            self._ping = None
            cursor.wake()
        else:
            self._ping = loop.call_at(due, self._ping_due, cursor)

    async def _events(self, cursor: Cursor) -> list[Event]:
        """The next events; an empty list when nothing happened for ping_s seconds."""
        if self.ping_s is not None:
            loop = asyncio.get_running_loop()
            self._active = loop.time()
            if self._ping is None:
                self._ping = loop.call_at(self._active + self.ping_s, self._ping_due, cursor)
        return await cursor.next()

    async def _stream(self, cursor: Cursor, send: Send) -> None:
        shape = self.shape
        headers_sent = opened = False
        while True:
            out: list[bytes] = []
            ended = False
            batch = await self._events(cursor)
            if not batch:
                out.append(PING)
            for event in batch:
                if isinstance(event, Queued):
                    out.append(sse.comment(f"queued position={event.position}"))
                elif isinstance(event, Delta | Finished) and not opened:
                    opened = True
                    out.append(shape.opening(self.session.usage(),
                                             event if isinstance(event, Delta) else None))
                if isinstance(event, Delta):
                    out.append(shape.delta(event))
                elif isinstance(event, Finished):
                    out.append(shape.finish(event))
                    ended = True
                elif isinstance(event, Failed):
                    if not opened and not headers_sent:
                        await error_response(event.error)(self._scope, _no_receive, send)
                        return
                    out.append(shape.error(error_body(event.error)))
                    ended = True
            if not out:
                continue  # Started alone: nothing to say yet, so no headers yet either
            if not headers_sent:
                headers_sent = True
                await send({"type": "http.response.start", "status": 200,
                            "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": b"".join(out),
                        "more_body": not ended})
            if ended:
                return

    async def _whole(self, cursor: Cursor, send: Send) -> None:
        deltas: list[Delta] = []
        async for event in cursor:
            if isinstance(event, Delta):
                deltas.append(event)
            elif isinstance(event, Finished):
                body = self.shape.whole(deltas, event)
                response = Response(json.dumps(body, ensure_ascii=False),
                                    media_type="application/json")
                await response(self._scope, _no_receive, send)
                return
            elif isinstance(event, Failed):
                await error_response(event.error)(self._scope, _no_receive, send)
                return


async def _no_receive() -> Any:  # plain responses never read; the race owns receive
    raise RuntimeError("a plain response does not read the request")
