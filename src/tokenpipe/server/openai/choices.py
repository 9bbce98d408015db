"""Several choices (`n`) of one OpenAI request: n generations of the same prompt, started
together so the engine decodes the prompt once (llama.cpp copies its KV cells to the other
sequences: slots.py), answered as one response.

Choice i runs with seed `seed + i` (mod 2^63) when the request has a seed, so each choice
is reproducible, and choice i is the answer a request with n=1 and that seed gets. Streamed,
each chunk carries its choice's `index`, and each choice its own `finish_reason`; whole, the
choices come in index order. `usage` counts the prompt once and sums the completions.

The answer is the one stream tail's (DoorResponse) over the sessions' cursors read as one:
a client that goes away cancels every choice at once; a choice that fails ends the
response (an error status before the first chunk, else an error event) and cancels the
others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from starlette.responses import Response
from starlette.types import Send

from ...errors import TokenpipeError
from ...protocol import sse
from ...protocol.openai.errors import error_body
from ...session import Delta, Event, Failed, Finished, GenerationSession, Queued
from ...types import GenerationRequest, Usage
from ..door_response import PING_INTERVAL_S, SSE_HEADERS, DoorResponse, Reading, no_receive
from .session_response import Shape, error_response

SEED_SPACE = 2**63


def choice_request(request: GenerationRequest, index: int) -> GenerationRequest:
    """The request of choice `index`: its seed moved on by `index` (none stays none)."""
    seed = request.params.seed
    if seed is None or index == 0:
        return request
    return replace(request, params=replace(request.params, seed=(seed + index) % SEED_SPACE))


def total_usage(usages: list[Usage]) -> Usage:
    """The prompt once (and its cache as the first choice found it), completions summed."""
    first = usages[0]
    return Usage(first.prompt_tokens, sum(u.completion_tokens for u in usages),
                 first.cached_tokens, sum(u.reasoning_tokens for u in usages),
                 sum(u.drafted_tokens for u in usages), sum(u.accepted_tokens for u in usages))


class Choice:
    """In a ChoiceCursors batch: the events after it are choice `index`'s."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class ChoiceCursors:
    """The cursors of n sessions read as one: each batch holds every choice's new events,
    each choice's after a Choice marker. Only choice 0 says the prompt's prefill progress
    (the prompt is decoded once for all)."""

    def __init__(self, sessions: list[GenerationSession], progress: bool) -> None:
        self._news = asyncio.Event()
        self._woken = False
        self.cursors = [s.cursor(on_news=self._news.set, progress=progress and i == 0)
                        for i, s in enumerate(sessions)]

    def __aiter__(self) -> AsyncIterator[object]:
        return self._each()

    async def _each(self) -> AsyncIterator[object]:
        while batch := await self.next():
            for event in batch:
                yield event

    async def next(self) -> list[Event | Choice]:
        """As Cursor.next: the events not yet taken, waiting for some; [] after wake()."""
        while True:
            self._news.clear()  # before polling: news after the poll wakes the wait
            out: list[Event | Choice] = []
            for index, cursor in enumerate(self.cursors):
                if not cursor.finished:
                    events = cursor.poll()
                    if events:
                        out.append(Choice(index))
                        out += events
            if out or self.finished:
                return out
            if self._woken:
                self._woken = False
                return out
            await self._news.wait()

    def wake(self) -> None:
        self._woken = True
        self._news.set()

    def close(self) -> None:
        for cursor in self.cursors:
            cursor.close()

    @property
    def finished(self) -> bool:
        return all(c.finished for c in self.cursors)


class ChoicesResponse(DoorResponse):
    """The answer of n sessions: SSE when `stream` (each chunk carries its choice's index),
    else one JSON object."""

    progress = True  # `: prefill N/M` comments (choice 0's)
    stream_headers = SSE_HEADERS

    def __init__(self, sessions: list[GenerationSession], shape: Shape, *, stream: bool,
                 include_usage: bool = False, ping_s: float | None = PING_INTERVAL_S) -> None:
        super().__init__(sessions[0], stream=stream, ping_s=ping_s)
        self.sessions = sessions
        self.shape = shape
        self.include_usage = include_usage
        self._index = 0  # the choice whose events come now
        self._begun: set[int] = set()  # the choices whose opening chunk is out
        self._finals: list[Finished | None] = [None] * len(sessions)
        self._over = False  # a choice failed: the answer is over, the rest unsaid
        self._prompted: set[int] = set()  # choices whose prompt token ids are out

    def _reader(self) -> Reading:
        return ChoiceCursors(self.sessions, self.stream and self.progress)

    def _leave(self, cursor: Reading) -> None:
        cursor.close()
        for session in self.sessions:
            session.cancel()  # a no-op once it ended

    def _waiting(self, event: Queued) -> bytes:
        return sse.comment(f"queued position={event.position}")  # (no "loading model")

    def _refusable(self, out: list[bytes]) -> bool:
        return not (self._begun or self._head.sent)

    def _begin(self, event: object, out: list[bytes]) -> None:
        if self._over:
            return
        if isinstance(event, Choice):  # the next choice's events: its deltas are one chunk
            self._index = event.index  # each once its opening is out
            self._opened = event.index in self._begun
        elif isinstance(event, Delta):
            self._begun.add(self._index)
            super()._begin(event, out)

    async def _end(self, end: Finished | Failed, out: list[bytes]) -> bool:
        if self._over:
            return True
        if isinstance(end, Failed):  # one choice failed: the answer ends, the others stop
            self._over, self._opened = True, False
            for session in self.sessions:
                session.cancel()
            out += (sse.data(error_body(end.error)), sse.DONE)
            return True
        if self._index not in self._begun:
            self._begun.add(self._index)
            out.append(self.shape.opening(self._index))
        self._finals[self._index] = end
        out.append(self.shape.finish(end.reason.value, self._index))
        if any(f is None for f in self._finals):
            return False
        if self.include_usage:
            out.append(self.shape.usage(total_usage([f.usage for f in self._finals if f])))
        out.append(sse.DONE)
        return True

    def _opening(self, event: Event) -> bytes:
        return self.shape.opening(self._index)

    def _delta(self, event: Delta) -> bytes:
        shape, index = self.shape, self._index
        if event.channel != "content":
            return shape.part(event, index)
        if shape.ids:  # the prompt's ids with each choice's first delta
            first = index not in self._prompted
            self._prompted.add(index)
            return shape.ids_delta(event, index, self.session.prompt_ids if first else None)
        if shape.scored:
            return shape.scored_delta(event, index)
        return shape.delta(event.text, index)

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc)

    async def _whole(self, cursor: Reading, send: Send) -> None:
        answers: list[list[Delta]] = [[] for _ in self.sessions]
        index = 0
        while batch := await cursor.next():
            for event in batch:
                if isinstance(event, Choice):
                    index = event.index
                elif isinstance(event, Delta):
                    answers[index].append(event)
                elif isinstance(event, Finished):
                    self._finals[index] = event
                elif isinstance(event, Failed):
                    for session in self.sessions:
                        session.cancel()
                    return await self._refuse(event.error, send)
        finals = [f for f in self._finals if f is not None]
        body = self.shape.whole_of([(deltas, f.reason.value) for deltas, f in
                                    zip(answers, finals, strict=True)],
                                   total_usage([f.usage for f in finals]),
                                   self.session.prompt_ids)
        response = Response(body.model_dump_json(), media_type="application/json")
        await response(self._scope, no_receive, send)


async def start_choices(start: Callable[[GenerationRequest], Awaitable[GenerationSession]],
                        request: GenerationRequest, n: int) -> list[GenerationSession]:
    """n sessions of `request` (choice_request each), started in order; if one cannot
    start, the ones started are cancelled and its error raised."""
    sessions: list[GenerationSession] = []
    try:
        for index in range(n):
            sessions.append(await start(choice_request(request, index)))
    except TokenpipeError:
        for session in sessions:
            with contextlib.suppress(Exception):
                session.cancel()
        raise
    return sessions
