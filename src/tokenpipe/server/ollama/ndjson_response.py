"""Serving one Ollama generation from its GenerationSession, as an ASGI response: NDJSON
(`application/x-ndjson`, one JSON object a line) when streamed, else one JSON object.

The response races the session's events against the client's disconnect (race.py), so a
generation whose client left is cancelled at once. Headers wait for the first text, the
end or a failure: a failure before the first token is a proper status with Ollama's
`{"error": ...}` body; after it, a last line `{"error": ...}`, as Ollama sends it. NDJSON
has no comment lines, so a request waiting for a place hears nothing until it runs (as
with Ollama).
"""

from __future__ import annotations

import math

from starlette.responses import JSONResponse, Response
from starlette.types import Send

from ...errors import TokenpipeError
from ...protocol.ollama.errors import error_body, status_of
from ...protocol.ollama.responses import Answer, call_json, line, timestamp
from ...session import Cursor, Delta, Failed, Finished, GenerationSession
from ..door_response import DoorResponse

NDJSON_HEADERS = [
    (b"content-type", b"application/x-ndjson"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each line on at once
]
JSON_TYPE = "application/json; charset=utf-8"  # Ollama's, for an answer not streamed


def error_response(exc: TokenpipeError, model: str | None = None) -> Response:
    """`exc` as Ollama's error JSON with this door's status (Retry-After when it has one)."""
    headers = {}
    if exc.retry_after_ms is not None:
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_ms / 1000)))
    return JSONResponse(error_body(exc, model), status_code=status_of(exc), headers=headers)


class NdjsonResponse(DoorResponse):
    """The ASGI response of one generation; its status is decided by the session's first
    events, not up front. No pings: NDJSON has no comment line."""

    stream_headers = NDJSON_HEADERS

    def __init__(self, session: GenerationSession, answer: Answer, *, stream: bool) -> None:
        super().__init__(session, stream=stream, ping_s=None)
        self.answer = answer

    async def _stream(self, cursor: Cursor, send: Send) -> None:
        answer = self.answer
        call: list[str] | None = None  # the call being written: [name, arguments so far]
        while True:
            out: list[bytes] = []
            ended = False
            batch = await cursor.next()
            now = timestamp()  # the lines of one batch leave in one write, at one time
            for event in batch:
                fragment = (isinstance(event, Delta) and event.channel == "tool_call"
                            and event.call_id is None)
                if call is not None and not fragment and not isinstance(event, Failed):
                    # Ollama sends a call whole: it is complete when what follows is not
                    # more of its arguments
                    out.append(answer.part(now, calls=[call_json(*call)]))
                    call = None
                if isinstance(event, Delta):
                    if event.channel == "content":
                        out.append(answer.delta(event.text, now))
                    elif event.channel == "reasoning":
                        out.append(answer.part(now, thinking=event.text))
                    elif call is None:
                        call = [event.name or "", event.text]
                    else:
                        call[1] += event.text
                elif isinstance(event, Finished):
                    out.append(line(answer.done("", event.reason, event.usage,
                                                event.timing)))
                    ended = True
                elif isinstance(event, Failed):
                    if not (out or self._head.sent):
                        return await self._refuse(event.error, send)
                    out.append(line(error_body(event.error, answer.model)))
                    ended = True
            if await self._head.write(send, out, ended):  # queued, started: no write yet
                return

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc, self.answer.model)

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        calls: list[list[str]] = []
        for d in deltas:
            if d.channel == "tool_call":
                if d.call_id is not None:
                    calls.append([d.name or "", ""])
                calls[-1][1] += d.text
        body = self.answer.done(
            "".join(d.text for d in deltas if d.channel == "content"), end.reason,
            end.usage, end.timing,
            "".join(d.text for d in deltas if d.channel == "reasoning"),
            [call_json(*c) for c in calls])
        return JSONResponse(body, media_type=JSON_TYPE)
