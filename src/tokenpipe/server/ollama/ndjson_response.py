"""Serving one Ollama generation from its GenerationSession, as an ASGI response: NDJSON
(`application/x-ndjson`, one JSON object a line) when streamed, else one JSON object.

The response races the session's events against the client's disconnect (race.py), so a
generation whose client left is cancelled at once. Headers wait for the first line: a
failure before it is a proper status with Ollama's `{"error": ...}` body; after it, a last
line `{"error": ...}`, as Ollama sends it. NDJSON has no comment lines, so a request
waiting for its place (or for its model to load), and a long prompt's prefill, hear
ordinary lines with no text and tokenpipe's own field (`queue_position`, `loading_model`,
`prefill`: docs/protocol.md), which Ollama's clients ignore.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from ...errors import TokenpipeError
from ...protocol.ollama.errors import error_body, status_of
from ...protocol.ollama.responses import Answer, call_json, line, timestamp
from ...session import Delta, Failed, Finished, GenerationSession, Progress, Queued
from ..door_response import DoorResponse, Reading, retry_headers, stream_headers

NDJSON_HEADERS = stream_headers(b"application/x-ndjson")
JSON_TYPE = "application/json; charset=utf-8"  # Ollama's, for an answer not streamed


def error_response(exc: TokenpipeError, model: str | None = None) -> Response:
    """`exc` as Ollama's error JSON with this door's status (Retry-After when it has one)."""
    return JSONResponse(error_body(exc, model), status_code=status_of(exc),
                        headers=retry_headers(exc, ms=False))


class NdjsonResponse(DoorResponse):
    """The ASGI response of one generation (the one stream tail's, DoorResponse); its status
    is decided by the session's first events, not up front. No pings: NDJSON has no
    comment line."""

    stream_headers = NDJSON_HEADERS

    progress = True  # a line with `prefill` while a long prompt is read

    def __init__(self, session: GenerationSession, answer: Answer, *, stream: bool) -> None:
        super().__init__(session, stream=stream, ping_s=None)
        self.answer = answer
        self._now = ""  # the batch's created_at
        self._call: list[str] | None = None  # the call being written: [name, arguments so far]

    async def _events(self, cursor: Reading, out: list[bytes]) -> list[Any]:
        batch = await super()._events(cursor, out)
        self._now = timestamp()  # the lines of one batch leave in one write, at one time
        return batch

    def _waiting(self, event: Queued) -> bytes:
        news = {"loading_model": True} if event.loading else {"queue_position": event.position}
        return self.answer.waiting(timestamp(), news)

    def _progress(self, event: Progress) -> bytes:
        return self.answer.waiting(timestamp(), {"prefill": {"done": event.done,
                                                             "total": event.total}})

    def _refusable(self, out: list[bytes]) -> bool:
        return not (out or self._head.sent)

    def _begin(self, event: object, out: list[bytes]) -> None:
        # every event comes this way (never _opened): a tool call goes whole
        answer, call = self.answer, self._call
        fragment = (isinstance(event, Delta) and event.channel == "tool_call"
                    and event.call_id is None)
        if call is not None and not fragment:
            # a call is complete when what follows is not more of its arguments
            out.append(answer.part(self._now, calls=[call_json(*call)]))
            self._call = call = None
        if not isinstance(event, Delta):
            return
        if event.channel == "content":
            out.append(answer.delta(event.text, self._now))
        elif event.channel == "reasoning":
            out.append(answer.part(self._now, thinking=event.text))
        elif call is None:
            self._call = [event.name or "", event.text]
        else:
            call[1] += event.text

    async def _end(self, end: Finished | Failed, out: list[bytes]) -> bool:
        if isinstance(end, Failed):
            out.append(line(error_body(end.error, self.answer.model)))
        else:
            self._begin(end, out)  # the call being written is complete
            out.append(line(self.answer.done("", end.reason, end.usage, end.timing)))
        return True

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
