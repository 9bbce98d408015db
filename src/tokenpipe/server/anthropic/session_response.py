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

import json
import math

from starlette.responses import JSONResponse, Response
from starlette.types import Send

from ...errors import TokenpipeError
from ...protocol import sse
from ...protocol.anthropic.errors import error_body, status_of
from ...protocol.anthropic.events import PING, MessageRender
from ...session import Cursor, Delta, Failed, Finished, GenerationSession, Queued
from ...types import Progress
from ..door_response import PING_INTERVAL_S, DoorResponse, no_receive

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


class SessionResponse(DoorResponse):
    """The ASGI response of one generation: SSE when `stream`, else one message."""

    progress = True  # `: prefill N/M` comments

    def __init__(self, session: GenerationSession, *, stream: bool,
                 ping_s: float = PING_INTERVAL_S) -> None:
        super().__init__(session, stream=stream, ping_s=ping_s)
        self.shape = MessageRender(session.model)

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
                    out.append(sse.waiting(event.position, event.loading))
                elif isinstance(event, Progress):
                    out.append(sse.progress(event.done, event.total))
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
                        await error_response(event.error)(self._scope, no_receive, send)
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
                await response(self._scope, no_receive, send)
                return
            elif isinstance(event, Failed):
                await error_response(event.error)(self._scope, no_receive, send)
                return

