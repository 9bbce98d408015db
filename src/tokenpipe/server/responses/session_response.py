"""Serving one Responses request as an ASGI response: a foreground generation (one JSON
response, or its numbered SSE events: protocol/responses/events.py), or the events of a
background one (Run.follow, or a stored one's replay).

As the other doors: a foreground session races the client's disconnect (race.py) and is
cancelled the moment its client leaves. Headers wait for the first thing worth saying, so a
failure before the first token is a proper status in OpenAI's shape; after it, an `error`
event and `response.failed` end the stream. A stored response is written before its last
event (or its JSON) goes out, so a GET right after the answer finds it. A background
stream's client leaving stops only that stream: the generation runs on.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ...errors import TokenpipeError
from ...protocol.responses.errors import http_body
from ...protocol.responses.events import ResponseEvents, failure_event
from ...protocol.responses.objects import ResponseShape
from ...session import Delta, Event, Failed, Finished, GenerationSession
from ..door_response import DoorResponse
from ..race import http_disconnect, race

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
]
Keep = Callable[[dict[str, Any], str], Awaitable[None]]  # stores (final response, text)


def error_response(exc: TokenpipeError) -> Response:
    """`exc` as OpenAI's error JSON with its status (and Retry-After when it has one)."""
    headers = {}
    if exc.retry_after_ms is not None:
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_ms / 1000)))
        headers["retry-after-ms"] = str(exc.retry_after_ms)  # the OpenAI SDKs honour it
    return JSONResponse(http_body(exc), status_code=exc.status, headers=headers)


class SessionResponse(DoorResponse):
    """A foreground generation: SSE when `stream`, else one response object."""

    progress = True  # `: prefill N/M` comments (ItemsResponse too)
    stream_headers = SSE_HEADERS
    opens = (Delta, Finished, Failed)  # a failure after the headers still opens a response

    def __init__(self, session: GenerationSession, shape: ResponseShape, *, stream: bool,
                 keep: Keep | None, ping_s: float) -> None:
        super().__init__(session, stream=stream, ping_s=ping_s)
        self.shape = shape
        self.events = ResponseEvents(shape)
        self.keep = keep
        self._parts: list[str] = []  # the text streamed so far

    async def _end(self, end: Finished | Failed, text: str) -> dict[str, Any]:
        final = self.shape.final(end, text)
        if self.keep is not None and isinstance(end, Finished):
            await self.keep(final, text)
        return final

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc)

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        return JSONResponse(await self._end(end, "".join(d.text for d in deltas)))

    def _opening(self, event: Event) -> bytes:
        return self.events.opening()

    def _delta(self, event: Delta) -> bytes:
        self._parts.append(event.text)
        return self.events.delta(event.seq, event.text)

    async def _closing(self, end: Finished | Failed) -> bytes:
        final = await self._end(end, "".join(self._parts))
        error = failure_event(end.error) if isinstance(end, Failed) else None
        return self.events.closing(len(self._parts), final, error)


class EventsResponse(Response):
    """A background response's events (a Run's, followed live, or a stored replay) as SSE.
    The client leaving ends only this stream."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self.chunks = chunks
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await race(self._send(send), http_disconnect(receive), settle=False)
        except OSError:
            pass

    async def _send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        async for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def once(chunk: bytes) -> AsyncIterator[bytes]:
    yield chunk

