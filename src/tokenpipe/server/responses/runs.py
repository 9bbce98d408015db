"""The Responses door's state: the store, and the background responses still running.

A background response is a resumable session (`start(request, resumable=True)`: it keeps
every delta it sealed) with no client attached. Its Run is the session's one reader, only
to be told of news; any number of streams follow it by reading the session's kept deltas
from where each left off (`take_deltas(after)`), so a client may drop and come back with
`starting_after` while the generation runs on. When it ends, the Run seals what is pending
(the delta count is final from then on), stores the response with its deltas (so its
stream still replays after a restart) and leaves the registry."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ...protocol import sse
from ...protocol.responses.events import OPENING, ResponseEvents, failure_event
from ...protocol.responses.objects import ResponseShape
from ...session import Failed, GenerationSession, State
from ...types import Message, ToolCall
from .store import ResponseStore, Stored

log = logging.getLogger("tokenpipe.responses")
CLOSE_WAIT_S = 5.0  # shutdown: how long the last background responses get to be stored


@dataclass
class Pending:
    """What a response stores besides itself: its input items and the conversation before
    its answer (previous conversation, then this input)."""

    input_items: list[dict[str, Any]]
    conversation: list[list[Any]]

    def stored(self, final: dict[str, Any], text: str,
               stream: dict[str, Any] | None = None) -> Stored:
        calls = tuple(ToolCall(i["call_id"], i["name"], i["arguments"])
                      for i in final.get("output") or () if i.get("type") == "function_call")
        answer = turn(Message("assistant", text, calls))
        return Stored(final["id"], float(final["created_at"]), final, self.input_items,
                      [*self.conversation, answer], stream)


def turn(m: Message) -> list[Any]:
    """A chat turn as the store keeps it: [role, text], and a turn's calls or the call it
    answers as a third element."""
    if m.tool_calls:
        return [m.role, m.content, {"tool_calls": [[c.id, c.name, c.arguments]
                                                   for c in m.tool_calls]}]
    if m.tool_call_id is not None:
        return [m.role, m.content, {"tool_call_id": m.tool_call_id}]
    return [m.role, m.content]


def message_of(entry: list[Any]) -> Message:
    """A stored turn back as a chat turn."""
    role, text, *rest = entry
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"a stored conversation holds role {role!r}")
    extra = rest[0] if rest else {}
    calls = tuple(ToolCall(*c) for c in extra.get("tool_calls", ()))
    return Message(role, text, calls, extra.get("tool_call_id"))


class Run:
    """One background response while it runs (and until it is stored)."""

    def __init__(self, session: GenerationSession, shape: ResponseShape, pending: Pending,
                 store: ResponseStore) -> None:
        self.session = session
        self.shape = shape
        self.events = ResponseEvents(shape)
        self.pending = pending
        self.final: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None  # the failure's error event
        self.deltas = 0  # once final: how many deltas the stream has
        self.deleted = False
        self._changed = asyncio.Event()
        self._store = store
        self._cursor = session.cursor(on_news=self._news)  # the reader, to hear of news
        self.task: asyncio.Task[None] | None = None

    def _news(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def snapshot(self) -> dict[str, Any]:
        """The response now: queued, or in progress with the text so far."""
        if self.final is not None:
            return self.final
        if self.session.state is State.QUEUED:
            return self.shape.snapshot("queued")
        text = "".join(d.text for d in self.session.take_deltas(-1, merge=True))
        output = [self.shape.message(text, "in_progress")] if text else []
        return self.shape.snapshot("in_progress", output, self.session.usage())

    async def watch(self) -> None:
        """Waits for the end, then stores the response and its deltas."""
        session = self.session
        await session.done.wait()
        end = session.final
        assert end is not None
        deltas = [d.text for d in session.take_deltas(-1, merge=True)]  # seals the rest
        self.deltas = len(deltas)
        self.error = failure_event(end.error) if isinstance(end, Failed) else None
        self.final = self.shape.final(end, "".join(deltas))
        self._cursor.close()
        self._news()
        if not self.deleted:
            stream = {"message_id": self.shape.message_id, "deltas": deltas,
                      "error": self.error}
            try:
                await self._store.put(self.pending.stored(self.final, "".join(deltas), stream))
            except Exception:
                log.exception("could not store background response %s", self.shape.id)

    def _aside(self) -> bytes:
        """What a stream says before the first delta, as a foreground one does: the queue
        place (or the model loading), then a long prompt's prefill progress."""
        s = self.session
        if s.state is State.QUEUED:
            return sse.waiting(s.position, s.loading) if s.position or s.loading else b""
        return sse.progress(s.progress.done, s.progress.total) if s.progress else b""

    async def follow(self, after: int, ping_s: float | None) -> AsyncIterator[bytes]:
        """The events numbered above `after`, as they come, to the end; a ping comment
        after ping_s seconds of silence."""
        if after < OPENING - 1:
            yield self.events.opening(after)
        seen = max(after - OPENING, -1)  # the last delta seq this reader has
        said = b""  # the queue place or prefill progress last said
        while True:
            changed, final = self._changed, self.final
            out: list[bytes] = []
            if seen < 0 and final is None and (aside := self._aside()) != said:
                said = aside  # before the deltas taken next: the last report comes with them
                out.append(aside)
            deltas = self.session.take_deltas(seen, merge=True)
            out += [self.events.delta(d.seq, d.text) for d in deltas]
            if deltas:
                seen = deltas[-1].seq
            if final is not None:
                out.append(self.events.closing(self.deltas, final, self.error, after))
                yield b"".join(out)
                return
            if out:
                yield b"".join(out)
            try:
                await asyncio.wait_for(changed.wait(), ping_s)
            except TimeoutError:
                yield sse.comment("ping")


def replay(row: Stored, after: int) -> bytes:
    """A stored background response's events numbered above `after`, as first sent."""
    assert row.stream is not None
    events = ResponseEvents(ResponseShape(row.response, row.stream["message_id"]))
    deltas: list[str] = row.stream["deltas"]
    out = [events.opening(after)] if after < OPENING - 1 else []
    out += [events.delta(seq, text) for seq, text in enumerate(deltas)
            if OPENING + seq > after]
    out.append(events.closing(len(deltas), row.response, row.stream["error"], after))
    return b"".join(out)


@dataclass
class ResponsesState:
    """The store and the running background responses, by response id."""

    store: ResponseStore
    runs: dict[str, Run] = field(default_factory=dict)

    def launch(self, run: Run) -> None:
        self.runs[run.shape.id] = run
        run.task = asyncio.create_task(self._watch(run), name=f"background {run.shape.id}")

    async def _watch(self, run: Run) -> None:
        try:
            await run.watch()
        finally:
            self.runs.pop(run.shape.id, None)

    async def settle(self, run: Run, wait_s: float) -> None:
        """Waits (up to `wait_s`) until the run has been stored."""
        if run.task is not None:
            await asyncio.wait({run.task}, timeout=wait_s)

    async def aclose(self) -> None:
        """Shutdown: what still runs is cancelled (the scheduler has failed it with
        shutting_down already under `tokenpipe serve`) and stored, then the file closed."""
        tasks = [r.task for r in self.runs.values() if r.task is not None]
        for run in list(self.runs.values()):
            run.session.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        with contextlib.suppress(Exception):
            await self.store.aclose()
