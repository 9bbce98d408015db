"""A foreground answer to a Responses request with tools: its output items (a message, or
function calls: protocol/responses/items.py) whole or as events numbered in the order they
are sent (0 response.created, 1 response.in_progress, then the items' events, then the
terminal one). Otherwise as SessionResponse: headers wait for the first thing worth
saying, a failure before it is an error status, one after it an `error` event and
`response.failed`."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Send

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
from ...session import Cursor, Delta, Failed, Finished, Queued
from .session_response import SessionResponse


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
    def _waiting(self, event: Queued) -> bytes:
        return sse.comment(f"queued position={event.position}")  # (no "loading model")

    async def _final(self, end: Finished | Failed, items: OutputItems
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        final, closing = ended(self.shape, end, items)
        if self.keep is not None and isinstance(end, Finished):
            await self.keep(final, text_of(items))
        return final, closing

    async def _stream(self, cursor: Cursor, send: Send) -> None:
        items = OutputItems(self.shape)
        numbered = Numbered()
        opened = False
        while True:
            out: list[bytes] = []
            ended = False
            for event in await self._events(cursor, out):
                if isinstance(event, Failed) and not (opened or self._head.sent):
                    return await self._refuse(event.error, send)
                if isinstance(event, Delta | Finished | Failed) and not opened:
                    opened = True
                    out.append(numbered.sse(opening_events(self.shape)))
                if isinstance(event, Delta):
                    out.append(numbered.sse(items.feed(event)))
                elif isinstance(event, Finished | Failed):
                    _, closing = await self._final(event, items)
                    out.append(numbered.sse(closing))
                    ended = True
            if await self._head.write(send, out, ended):
                return

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        items = OutputItems(self.shape)
        for delta in deltas:
            items.feed(delta)
        final, _ = await self._final(end, items)
        return JSONResponse(final)
