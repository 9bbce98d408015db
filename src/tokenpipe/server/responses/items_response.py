"""A foreground answer to a Responses request with tools: its output items (a message, or
function calls: protocol/responses/items.py) whole or as events numbered in the order they
are sent (0 response.created, 1 response.in_progress, then the items' events, then the
terminal one). Otherwise as SessionResponse: headers wait for the first thing worth
saying, a failure before it is an error status, one after it an `error` event and
`response.failed`."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from ...protocol import sse
from ...protocol.responses.events import failure_event
from ...protocol.responses.items import (
    Numbered,
    OutputItems,
    closing_events,
    opening_events,
    terminal_events,
)
from ...protocol.responses.objects import ResponseShape, status_of
from ...session import Delta, Event, Failed, Finished, GenerationSession, Queued
from .session_response import Keep, SessionResponse


def text_of(items: OutputItems) -> str:
    return "".join(i["content"][0]["text"] for i in items.output if i["type"] == "message")


def ended(shape: ResponseShape, end: Finished | Failed, items: OutputItems
          ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response as it ended (its items closed), and the events that close the stream."""
    events = closing_events(items, status_of(end))
    final = shape.final(end, "", items.output)
    error = failure_event(end.error) if isinstance(end, Failed) else None
    return final, events + terminal_events(final, error)


class ItemsResponse(SessionResponse):
    def __init__(self, session: GenerationSession, shape: ResponseShape, *, stream: bool,
                 keep: Keep | None, ping_s: float) -> None:
        super().__init__(session, shape, stream=stream, keep=keep, ping_s=ping_s)
        self.items = OutputItems(shape)  # the answer's items so far (whole or streamed)
        self.numbered = Numbered()

    def _waiting(self, event: Queued) -> bytes:
        return sse.comment(f"queued position={event.position}")  # (no "loading model")

    async def _final(self, end: Finished | Failed, items: OutputItems
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        final, closing = ended(self.shape, end, items)
        if self.keep is not None and isinstance(end, Finished):
            await self.keep(final, text_of(items))
        return final, closing

    def _opening(self, event: Event) -> bytes:
        return self.numbered.sse(opening_events(self.shape))

    def _delta(self, event: Delta) -> bytes:
        return self.numbered.sse(self.items.feed(event))

    async def _closing(self, end: Finished | Failed) -> bytes:
        _, closing = await self._final(end, self.items)
        return self.numbered.sse(closing)

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        for delta in deltas:
            self.items.feed(delta)
        final, _ = await self._final(end, self.items)
        return JSONResponse(final)
