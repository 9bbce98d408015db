"""A background response with tools: as a Run (runs.py), but its events are its output
items' (protocol/responses/items.py), numbered in order. The numbers are a function of the
session's sealed deltas alone (item ids follow from their place), so a stream resumed with
`starting_after` rebuilds the events from the first delta and sends those after N; stored,
the deltas keep their channel and call, so the replay after a restart says the same."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ...protocol import sse
from ...protocol.responses.errors import bad
from ...protocol.responses.events import failure_event
from ...protocol.responses.items import (
    Numbered,
    OutputItems,
    closing_events,
    opening_events,
    terminal_events,
)
from ...protocol.responses.objects import ResponseShape, status_of
from ...session import Failed, State
from ...types import Delta
from .runs import Run, log
from .store import Stored


def _stored(delta: Delta) -> list[Any]:
    return [delta.text, delta.channel, delta.index, delta.call_id, delta.name]


def _delta(seq: int, kept: list[Any]) -> Delta:
    text, channel, index, call_id, name = kept
    return Delta(seq, text, channel, index, call_id, name)


class ItemsRun(Run):
    """One background response with tools while it runs (and until it is stored)."""

    def snapshot(self) -> dict[str, Any]:
        if self.final is not None:
            return self.final
        if self.session.state is State.QUEUED:
            return self.shape.snapshot("queued")
        items = OutputItems(self.shape)
        for delta in self.session.take_deltas(-1, merge=True):
            items.feed(delta)
        return self.shape.snapshot("in_progress", items.output, self.session.usage())

    async def watch(self) -> None:
        session = self.session
        await session.done.wait()
        end = session.final
        assert end is not None
        deltas = session.take_deltas(-1, merge=True)  # seals the rest
        items = OutputItems(self.shape)
        for delta in deltas:
            items.feed(delta)
        closing_events(items, status_of(end))
        self.deltas = len(deltas)
        self.error = failure_event(end.error) if isinstance(end, Failed) else None
        self.final = self.shape.final(end, "", items.output)
        self._cursor.close()
        self._news()
        if not self.deleted:
            stream = {"message_id": self.shape.message_id, "items": True,
                      "deltas": [_stored(d) for d in deltas], "error": self.error}
            text = "".join(d.text for d in deltas if d.channel == "content")
            try:
                await self._store.put(self.pending.stored(self.final, text, stream))
            except Exception:
                log.exception("could not store background response %s", self.shape.id)

    def check_after(self, after: int) -> None:
        """A response resumes after any event its client can have seen: one sent so far
        (all of them, once it ended)."""
        numbered = Numbered(after=10**18)  # counts, sends nothing
        numbered.sse(opening_events(self.shape))
        items = OutputItems(self.shape)
        final = self.final
        for delta in self.session.take_deltas(-1, merge=True):
            numbered.sse(items.feed(delta))
        if final is not None:
            numbered.sse(closing_events(items, final["status"])
                         + terminal_events(final, self.error))
        if after >= numbered.count:
            raise bad(f"starting_after {after} is beyond the last event sent so far "
                      f"({numbered.count - 1})", "starting_after")

    async def follow(self, after: int, ping_s: float | None) -> AsyncIterator[bytes]:
        numbered = Numbered(after)
        items = OutputItems(self.shape)
        first = numbered.sse(opening_events(self.shape))
        if first:
            yield first
        seen = -1
        while True:
            changed, final = self._changed, self.final
            out = []
            for delta in self.session.take_deltas(seen, merge=True):
                out.append(numbered.sse(items.feed(delta)))
                seen = delta.seq
            if final is not None:
                status = final["status"]
                out.append(numbered.sse(closing_events(items, status)
                                        + terminal_events(final, self.error)))
                yield b"".join(out)
                return
            if any(out):
                yield b"".join(out)
            try:
                await asyncio.wait_for(changed.wait(), ping_s)
            except TimeoutError:
                yield sse.comment("ping")


def replay_items(row: Stored, after: int) -> tuple[bytes, int]:
    """A stored background response with tools: its events numbered above `after`, as first
    sent, and the number of its last event."""
    assert row.stream is not None
    shape = ResponseShape(row.response, row.stream["message_id"])
    numbered = Numbered(after)
    items = OutputItems(shape)
    out = [numbered.sse(opening_events(shape))]
    for seq, kept in enumerate(row.stream["deltas"]):
        out.append(numbered.sse(items.feed(_delta(seq, kept))))
    out.append(numbered.sse(closing_events(items, row.response["status"])
                            + terminal_events(row.response, row.stream["error"])))
    return b"".join(out), numbered.count - 1
