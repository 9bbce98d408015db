"""A foreground answer to a Responses request with tools: its output items (a message, or
function calls: protocol/responses/items.py) whole or as numbered events. The events are
numbered in the order they are sent (0 response.created, 1 response.in_progress, then the
items' events, then the terminal one); such a response never runs in the background, so
no stream of it is ever resumed. Otherwise as SessionResponse: headers wait for the first
thing worth saying, a failure before it is an error status, one after it an `error` event
and `response.failed`."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse
from starlette.types import Send

from ...protocol import sse
from ...protocol.responses.events import failure_event
from ...protocol.responses.items import OutputItems
from ...protocol.responses.objects import status_of
from ...session import Cursor, Delta, Failed, Finished, Queued
from ..door_response import no_receive
from .session_response import SSE_HEADERS, SessionResponse, error_response

_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete",
             "cancelled": "response.incomplete", "failed": "response.failed"}


class ItemsResponse(SessionResponse):
    async def _final(self, end: Finished | Failed, items: OutputItems
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        status = status_of(end)
        closing = items.close("incomplete" if status != "completed" else "completed")
        final = self.shape.final(end, "", items.output)
        if self.keep is not None and isinstance(end, Finished):
            text = "".join(i["content"][0]["text"] for i in items.output
                           if i["type"] == "message")
            await self.keep(final, text)
        return final, closing

    async def _stream(self, cursor: Cursor, send: Send) -> None:
        items = OutputItems(self.shape)
        number = 0
        headers_sent = opened = False

        def numbered(events: list[dict[str, Any]]) -> bytes:
            nonlocal number
            out = []
            for event in events:
                event["sequence_number"] = number
                number += 1
                out.append(sse.event(event["type"], event))
            return b"".join(out)

        while True:
            out: list[bytes] = []
            ended = False
            batch = await self._events(cursor)
            if not batch:
                out.append(sse.comment("ping"))
            for event in batch:
                if isinstance(event, Queued):
                    out.append(sse.comment(f"queued position={event.position}"))
                    continue
                if isinstance(event, Failed) and not opened and not headers_sent:
                    await error_response(event.error)(self._scope, no_receive, send)
                    return
                if isinstance(event, Delta | Finished | Failed) and not opened:
                    opened = True
                    out.append(numbered([
                        {"type": "response.created", "response": self.shape.snapshot(
                            "in_progress")},
                        {"type": "response.in_progress", "response": self.shape.snapshot(
                            "in_progress")}]))
                if isinstance(event, Delta):
                    out.append(numbered(items.feed(event)))
                elif isinstance(event, Finished | Failed):
                    final, closing = await self._final(event, items)
                    if isinstance(event, Failed):
                        closing = [*closing, failure_event(event.error)]
                    closing.append({"type": _TERMINAL[final["status"]], "response": final})
                    out.append(numbered(closing))
                    ended = True
            if not out:
                continue
            if not headers_sent:
                headers_sent = True
                await send({"type": "http.response.start", "status": 200,
                            "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": b"".join(out),
                        "more_body": not ended})
            if ended:
                return

    async def _whole(self, cursor: Cursor, send: Send) -> None:
        items = OutputItems(self.shape)
        async for event in cursor:
            if isinstance(event, Delta):
                items.feed(event)
            elif isinstance(event, Finished):
                final, _ = await self._final(event, items)
                await JSONResponse(final)(self._scope, no_receive, send)
                return
            elif isinstance(event, Failed):
                await error_response(event.error)(self._scope, no_receive, send)
                return
