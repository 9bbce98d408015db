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

from starlette.responses import JSONResponse, Response

from ...errors import TokenpipeError
from ...protocol.anthropic.errors import error_body, status_of
from ...protocol.anthropic.events import PING, MessageRender
from ...session import Delta, Event, Failed, Finished, GenerationSession
from ..door_response import (
    PING_INTERVAL_S,
    SSE_HEADERS,
    DoorResponse,
    retry_headers,
)


def error_response(exc: TokenpipeError) -> Response:
    """`exc` as Anthropic's error JSON with its status (and Retry-After when it has one)."""
    return JSONResponse(error_body(exc), status_code=status_of(exc),
                        headers=retry_headers(exc))


class SessionResponse(DoorResponse):
    """The ASGI response of one generation: SSE when `stream`, else one message."""

    progress = True  # `: prefill N/M` comments
    stream_headers = SSE_HEADERS
    ping = PING

    def __init__(self, session: GenerationSession, *, stream: bool,
                 ping_s: float = PING_INTERVAL_S) -> None:
        super().__init__(session, stream=stream, ping_s=ping_s)
        self.shape = MessageRender(session.model)

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc)

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        return Response(json.dumps(self.shape.whole(deltas, end), ensure_ascii=False),
                        media_type="application/json")

    def _opening(self, event: Event) -> bytes:
        return self.shape.opening(self.session.usage(),
                                  event if isinstance(event, Delta) else None)

    def _delta(self, event: Delta) -> bytes:
        return self.shape.delta(event)

    async def _closing(self, end: Finished | Failed) -> bytes:
        if isinstance(end, Failed):
            return self.shape.error(error_body(end.error))
        return self.shape.finish(end)
