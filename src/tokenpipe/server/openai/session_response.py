"""Serving one OpenAI request from its GenerationSession, as an ASGI response (the lean SSE
response: no StreamingResponse, no task group; one send per batch of events).

The response races the session's events against the client's disconnect (race.py);
whichever ends first cancels the other, and a generation whose client left is cancelled
at once, so its compute stops at the next step.

Headers wait for the first thing worth saying: the first text, the end, a failure, a queue
position or a due ping. So a failure before the first token (an engine fault at prefill, a
shutdown) is a proper HTTP status; after the first chunk it is one `data: {"error": ...}`
event, then `data: [DONE]`. A request that has to wait for capacity commits to 200 and
hears `: queued position=N` comment lines (SSE clients, the OpenAI SDKs too, skip them).
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse, Response

from ...errors import TokenpipeError
from ...protocol import sse
from ...protocol.openai.errors import error_body
from ...protocol.openai.render import ChatRender, CompletionRender
from ...session import Delta, Event, Failed, Finished, GenerationSession
from ..door_response import (
    PING_INTERVAL_S,
    SSE_HEADERS,
    DoorResponse,
    retry_headers,
)

Shape = ChatRender | CompletionRender  # the OpenAI objects of one answer


def error_response(exc: TokenpipeError, fields: Mapping[str, str] | None = None) -> Response:
    """`exc` as OpenAI's error JSON with its status (and Retry-After when it has one)."""
    return JSONResponse(error_body(exc, fields), status_code=exc.status,
                        headers=retry_headers(exc))


class SessionResponse(DoorResponse):
    """The ASGI response of one generation: SSE when `stream`, else one JSON object. Its
    status and headers are decided by the session's first events, not up front."""

    progress = True  # `: prefill N/M` comments
    stream_headers = SSE_HEADERS

    def __init__(self, session: GenerationSession, shape: Shape, *, stream: bool,
                 include_usage: bool = False, ping_s: float = PING_INTERVAL_S) -> None:
        super().__init__(session, stream=stream, ping_s=ping_s)
        self.shape = shape
        self.include_usage = include_usage
        self._prompted = False  # the prompt's token ids are out (return_token_ids)

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc)

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        body = self.shape.whole(deltas, end.reason.value, end.usage, self.session.prompt_ids)
        return Response(body.model_dump_json(), media_type="application/json")

    def _opening(self, event: Event) -> bytes:
        shape = self.shape
        return shape.opening(prompt=self._prompt() if shape.opening_has_prompt else None)

    def _prompt(self) -> tuple[int, ...] | None:
        """The prompt's ids, the first time they are known and asked for."""
        prompt = self.session.prompt_ids
        if self._prompted or prompt is None or not self.shape.ids:
            return None
        self._prompted = True
        return prompt

    def _delta(self, event: Delta) -> bytes:
        shape = self.shape
        if event.channel != "content":
            return shape.part(event)
        if shape.ids:
            return shape.ids_delta(event, prompt=self._prompt())
        if shape.scored:
            return shape.scored_delta(event)
        return shape.delta(event.text)

    async def _closing(self, end: Finished | Failed) -> bytes:
        if isinstance(end, Failed):
            return sse.data(error_body(end.error)) + sse.DONE
        chunks = self.shape.finish(end.reason.value)
        if self.include_usage:
            chunks += self.shape.usage(end.usage)
        return chunks + sse.DONE
