"""Serving one Responses request as an ASGI response (the one stream tail, DoorResponse): a
foreground generation (one JSON response, or its numbered SSE events), or the events of a
background one (followed from the resume store, or a stored one's replay). Text or output
items is the answer's shape (protocol/responses/answers.py), not a class here.

As the other doors: a foreground session races the client's disconnect (race.py) and is
cancelled the moment its client leaves. Headers wait for the first thing worth saying, so a
failure before the first token is a proper status in OpenAI's shape; after it, an `error`
event and `response.failed` end the stream. A stored response is written before its last
event (or its JSON) goes out, so a GET right after the answer finds it. A background
stream's client leaving stops only that stream: the generation runs on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ...errors import TokenpipeError
from ...protocol.responses.answers import Answer
from ...protocol.responses.errors import http_body
from ...protocol.responses.events import failure_event
from ...session import Delta, Event, Failed, Finished, GenerationSession
from ..door_response import SSE_HEADERS, DoorResponse, Reading, retry_headers
from ..resumable import ResumeStore
from .runs import Run
from .store import StoreError

Keep = Callable[[dict[str, Any], str], Awaitable[None]]  # stores (final response, text)


def error_response(exc: TokenpipeError) -> Response:
    """`exc` as OpenAI's error JSON with its status (and Retry-After when it has one)."""
    return JSONResponse(http_body(exc), status_code=exc.status, headers=retry_headers(exc))


class SessionResponse(DoorResponse):
    """A foreground generation: SSE when `stream`, else one response object; its `answer`
    (protocol/responses/answers.py) is one message's text or, with tools, output items."""

    progress = True  # `: prefill N/M` comments
    stream_headers = SSE_HEADERS
    opens = (Delta, Finished, Failed)  # a failure after the headers still opens a response

    def __init__(self, session: GenerationSession, answer: Answer, *, stream: bool,
                 keep: Keep | None, ping_s: float) -> None:
        super().__init__(session, stream=stream, ping_s=ping_s)
        self.answer = answer
        self.keep = keep
        self._delta = answer.feed  # type: ignore[method-assign,assignment]  # hot path: no hop

    async def _end_of(self, end: Finished | Failed) -> tuple[dict[str, Any], Finished | Failed]:
        """The response as it ended, stored first; a store that cannot write turns the
        end into that failure (the answer is not kept, so it is not `completed`)."""
        final = self.answer.final(end)
        if self.keep is not None and isinstance(end, Finished):
            try:
                await self.keep(final, self.answer.text())
            except StoreError as exc:
                end = Failed(exc, end.usage)
                final = self.answer.final(end)
        return final, end

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc)

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        for delta in deltas:
            self.answer.add(delta)
        final, ended = await self._end_of(end)
        if isinstance(ended, Failed):
            return error_response(ended.error)
        return JSONResponse(final)

    def _opening(self, event: Event) -> bytes:
        return self.answer.opening()

    async def _closing(self, end: Finished | Failed) -> bytes:
        final, end = await self._end_of(end)
        error = failure_event(end.error) if isinstance(end, Failed) else None
        return self.answer.closing(final, error)


class BackgroundResponse(DoorResponse):
    """A stream that follows a background response (Run) from the resume store: its
    events above `after`. The headers and response.created go at once; the client leaving
    ends only this stream: the generation runs on."""

    progress = True
    stream_headers = SSE_HEADERS

    def __init__(self, run: Run, streams: ResumeStore, after: int,
                 ping_s: float | None) -> None:
        super().__init__(run.session, stream=True, ping_s=ping_s)
        self.run, self.streams = run, streams
        self.answer = run.answer(after)
        self._delta = self.answer.feed  # type: ignore[method-assign,assignment]

    def _reader(self) -> Reading:
        token = self.session.stream_token
        assert token is not None
        # from the first delta: an answer's event numbers follow from all of them
        return self.streams.take_over(token, -1, None, progress=True)

    def _leave(self, cursor: Reading) -> None:
        cursor.close()

    async def _stream(self, cursor: Reading, send: Send) -> None:
        self._opened = True
        await self._head.start(send)
        opening = self.answer.opening()
        if opening:
            await self._head.write(send, [opening], False)
        await super()._stream(cursor, send)

    async def _closing(self, end: Finished | Failed) -> bytes:
        await self.run.settled.wait()  # how it ends: stored, or failed to store
        return self.answer.closing(self.run.ended(), self.run.error)

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc)


class EventsResponse(Response):
    """A stored background response's events (its replay) as SSE."""

    def __init__(self, events: bytes) -> None:
        self.events = events
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": self.events, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away
            pass
