"""The Responses door's background responses while they run.

A background response is a resumable session (`start(request, resumable=True)`: it keeps
every delta it sealed) with no client attached, kept in the one resume store
(server/resumable.py) by its stream token: any number of streams follow it there, each
with a cursor from the store's take-over (session_response.BackgroundResponse), so a client
may drop and come back with `starting_after` while the generation runs on. When it ends,
the Run makes the response as it ended (once: every stream closes with the same object),
stores it with its deltas (so its stream still replays after a restart), and leaves the
registry; the resume store forgets it after its grace period.

While it runs, the store holds its record (ResponseStore.announce): with a store shared
by replicas (`--state`), another replica that is asked for it finds the record, replays
its stream from the shared resume store (`find`) and follows it there as a read-only Run
(`follow`): retrieve, its events, cancel and input_items work on any replica. The
replica that runs it stores it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ...protocol.responses.answers import NOTHING, Answer, answer_of, kept
from ...protocol.responses.errors import bad
from ...protocol.responses.events import failure_event
from ...protocol.responses.objects import ResponseShape
from ...session import Delta, Failed, GenerationSession, State
from ..resumable import Held, ResumeStore
from .store import Pending, ResponseStore, StoreError

log = logging.getLogger("tokenpipe.responses")
CLOSE_WAIT_S = 5.0  # shutdown: how long the last background responses get to be stored
UNSTORED_KEPT = 256  # background responses the store could not write, kept in memory
FOLLOW_POLL_S = 0.05  # how often a replica looks for another's stream that has not begun


class Run:
    """One background response while it runs (and until it is stored). `items`: its
    answer is output items (a request with tools or reasoning), else one message's text."""

    def __init__(self, session: GenerationSession, shape: ResponseShape, items: bool,
                 pending: Pending, store: ResponseStore, client: str = "unknown") -> None:
        self.session = session
        self.client = client  # the address that started it (the per-client cap's key)
        self.shape = shape
        self.items = items
        self.pending = pending
        self.final: dict[str, Any] | None = None  # the response as it ended
        self.error: dict[str, Any] | None = None  # the failure's error event
        self.deleted = False
        self.unstored = False  # it ended, but the store could not write it
        self._kept: dict[str, Any] | None = None  # its stream as the store keeps it
        self._text = ""  # its message text, for the stored conversation
        self._store = store
        self.task: asyncio.Task[None] | None = None
        # its end is what it will stay: stored, or failed to store (set at once for a run
        # another replica stores)
        self.settled = asyncio.Event()

    @classmethod
    def followed(cls, session: GenerationSession, record: dict[str, Any],
                 store: ResponseStore) -> Run:
        """A background response another replica runs (its `record`), followed here:
        `session` replays its stream; never stored from here."""
        shape = ResponseShape(record["response"], record["message_id"])
        run = cls(session, shape, record["items"], Pending(record["input_items"], []), store)
        run.settled.set()
        return run

    def record(self) -> dict[str, Any]:
        """What another replica needs to follow this response while it runs."""
        return {"token": self.session.stream_token, "response": self.shape.base,
                "message_id": self.shape.message_id, "items": self.items,
                "input_items": self.pending.input_items}

    def answer(self, after: int = -1) -> Answer:
        """The answer's events above `after`, as a stream of this response says them."""
        return answer_of(self.shape, self.items, after)

    def _so_far(self) -> tuple[Answer, list[Delta]]:
        """Every delta so far (they count as sent), fed to an answer that says nothing;
        past a shared store's log gate (the run's own account, stored whole at its end)."""
        cursor = self.session.cursor(gated=False)
        try:
            deltas = [e for e in cursor.poll() if isinstance(e, Delta)]
        finally:
            cursor.close()
        answer = self.answer(NOTHING)
        answer.opening()
        for delta in deltas:
            answer.feed(delta)
        return answer, deltas

    def snapshot(self) -> dict[str, Any]:
        """The response now: queued, in progress with the answer so far (also while its
        end is being stored: a store that fails makes it failed), or as it ended."""
        if self.session.final is not None and self.settled.is_set():
            return self.ended()
        if self.session.state is State.QUEUED:
            return self.shape.snapshot("queued")
        answer, _ = self._so_far()
        return self.shape.snapshot("in_progress", answer.output(), self.session.usage())

    def ended(self) -> dict[str, Any]:
        """The response as it ended (the session has): made once, so every stream and the
        store say the same."""
        if self.final is None:
            end = self.session.final
            assert end is not None
            answer, deltas = self._so_far()
            self.error = failure_event(end.error) if isinstance(end, Failed) else None
            self.final = answer.final(end)
            self._kept = kept(deltas, self.items, self.shape.message_id, self.error)
            self._text = answer.text()
        return self.final

    def check_after(self, after: int) -> None:
        """A response resumes after any event its client can have seen: one sent so far
        (all of them, once it ended)."""
        answer, _ = self._so_far()
        if self.session.final is not None:
            answer.closing(self.ended(), self.error)
        if after >= answer.count:
            raise bad(f"starting_after {after} is beyond the last event sent so far "
                      f"({answer.count - 1})", "starting_after")

    async def watch(self) -> None:
        """Waits for the end, then stores the response and its deltas."""
        try:
            await self.session.done.wait()
            final = self.ended()
            if not self.deleted:
                await self._keep(final)
        finally:
            self.settled.set()

    async def _keep(self, final: dict[str, Any]) -> None:
        try:
            if not await self._store.put(self.pending.stored(final, self._text, self._kept)):
                self.deleted = True  # on another replica, while it ran
        except StoreError as exc:  # kept readable (ResponsesState.unstored), as failed
            end = self.session.final
            assert end is not None
            self.error = failure_event(exc)
            self.final = self._so_far()[0].final(Failed(exc, end.usage))
            self.unstored = True
        except Exception:
            log.exception("could not store background response %s", self.shape.id)


def queued(record: dict[str, Any]) -> dict[str, Any]:
    """The response of `record` (another replica's) before its stream begins."""
    return ResponseShape(record["response"], record["message_id"]).snapshot("queued")


@dataclass
class ResponsesState:
    """The store and the running background responses, by response id; `streams`: the
    resume store they are followed through."""

    store: ResponseStore
    streams: ResumeStore
    runs: dict[str, Run] = field(default_factory=dict)
    # the last UNSTORED_KEPT runs the store could not write: GET still finds them (failed)
    unstored: OrderedDict[str, Run] = field(default_factory=OrderedDict)
    # other replicas' runs followed here, by stream token: let go of when they end
    followed: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def running(self, client: str) -> int:
        """Background responses `client` has running now."""
        return sum(1 for run in self.runs.values() if run.client == client)

    def find(self, response_id: str) -> Run | None:
        """A running background response, or one the store could not write."""
        return self.runs.get(response_id) or self.unstored.get(response_id)

    async def launch(self, run: Run) -> None:
        """Runs `run` in the background, announced first (its end replaces the record)."""
        self.streams.keep(Held(run.session, run.shape.id))
        self.runs[run.shape.id] = run
        try:
            await self.store.announce(run.shape.id, run.record())
        finally:
            run.task = asyncio.create_task(self._watch(run),
                                           name=f"background {run.shape.id}")

    async def follow(self, record: dict[str, Any], wait_s: float) -> Run | None:
        """The background response of `record`, which another replica runs, followed here
        from its stream; None where its stream has not begun after `wait_s` (it is queued
        there) or is gone (its replica stopped)."""
        token: str = record["token"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (held := await self.streams.find(token)) is None:
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(FOLLOW_POLL_S)
        if token not in self.followed:
            self.followed[token] = asyncio.create_task(self._let_go(held.session))
        return Run.followed(held.session, record, self.store)

    async def _let_go(self, session: GenerationSession) -> None:
        """A followed run ended: its copy here is forgotten after the grace period (not
        before: a follower leaving must not cancel it where it runs)."""
        try:
            await session.done.wait()
            self.streams.orphan(session)
        finally:
            self.followed.pop(session.stream_token or "", None)

    async def _watch(self, run: Run) -> None:
        try:
            await run.watch()
        finally:
            self.runs.pop(run.shape.id, None)
            if run.unstored and not run.deleted:
                self.unstored[run.shape.id] = run
                while len(self.unstored) > UNSTORED_KEPT:
                    self.unstored.popitem(last=False)
            self.streams.orphan(run.session)  # its followers read on; forgotten after grace
            await self.store.retire(run.shape.id)  # stored in its place, or not at all

    async def settle(self, run: Run, wait_s: float) -> None:
        """Waits (up to `wait_s`) until the run has been stored."""
        if run.task is not None:
            await asyncio.wait({run.task}, timeout=wait_s)

    async def aclose(self) -> None:
        """Shutdown: what still runs is cancelled (the scheduler has failed it with
        shutting_down already under `tokenpipe serve`) and stored, then the file closed."""
        for task in list(self.followed.values()):
            task.cancel()
        tasks = [r.task for r in self.runs.values() if r.task is not None]
        for run in list(self.runs.values()):
            run.session.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        with contextlib.suppress(Exception):
            await self.store.aclose()
