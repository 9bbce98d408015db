"""Several choices (`n`) of one OpenAI request: n generations of the same prompt, started
together so the engine decodes the prompt once (llama.cpp copies its KV cells to the other
sequences: slots.py), answered as one response.

Choice i runs with seed `seed + i` (mod 2^63) when the request has a seed, so each choice
is reproducible, and choice i is the answer a request with n=1 and that seed gets. Streamed,
each chunk carries its choice's `index`, and each choice its own `finish_reason`; whole, the
choices come in index order. `usage` counts the prompt once and sums the completions.

The response races the sessions against the client's leaving, as every door does
(race.py): a client that goes away cancels every choice at once; a choice that fails ends
the response (an error status before the first chunk, else an error event) and cancels
the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ...errors import TokenpipeError
from ...protocol import sse
from ...protocol.openai.errors import error_body
from ...session import Cursor, Delta, Event, Failed, Finished, GenerationSession, Queued
from ...types import GenerationRequest, Usage
from ..door_response import PING_INTERVAL_S, HeadFirst, no_receive
from ..race import http_disconnect, race
from .session_response import SSE_HEADERS, Shape, error_response

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
                 first.cached_tokens, sum(u.reasoning_tokens for u in usages))


class ChoicesResponse(Response):
    """The ASGI response of n sessions: SSE when `stream`, else one JSON object."""

    def __init__(self, sessions: list[GenerationSession], shape: Shape, *, stream: bool,
                 include_usage: bool = False, ping_s: float | None = PING_INTERVAL_S) -> None:
        self.sessions = sessions
        self.shape = shape
        self.stream = stream
        self.include_usage = include_usage
        self.ping_s = ping_s or None
        self.status_code = 200
        self.background = None
        self._news = asyncio.Event()
        self._scope: Scope = {"type": "http"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._scope = scope
        cursors = [s.cursor(on_news=self._news.set) for s in self.sessions]
        try:
            await race(self._run(cursors, send), http_disconnect(receive), settle=False)
        except OSError:  # the client went away while we wrote
            pass
        finally:
            for cursor, session in zip(cursors, self.sessions, strict=True):
                cursor.close()
                session.cancel()  # a no-op once it ended

    async def _next(self, cursors: list[Cursor]) -> list[tuple[int, list[Event]]] | None:
        """Each choice's new events; None when ping_s passed with none."""
        while True:
            self._news.clear()  # before polling: news after the poll wakes the wait
            polled = [(i, c.poll()) for i, c in enumerate(cursors) if not c.finished]
            batch = [(i, events) for i, events in polled if events]
            if batch:
                return batch
            try:
                await asyncio.wait_for(self._news.wait(), self.ping_s)
            except TimeoutError:
                return None

    async def _run(self, cursors: list[Cursor], send: Send) -> None:
        shape, stream = self.shape, self.stream
        answers: list[list[Delta]] = [[] for _ in cursors]
        finals: list[Finished | None] = [None] * len(cursors)
        opened: set[int] = set()
        head = HeadFirst(SSE_HEADERS)
        while True:
            batch = await self._next(cursors)
            out: list[bytes] = []
            if batch is None:
                out.append(sse.comment("ping"))
                batch = []
            for index, events in batch:
                for event in events:
                    if isinstance(event, Failed):
                        await self._fail(event, send, out, head, stream and bool(opened))
                        return
                    if isinstance(event, Queued):
                        out.append(sse.comment(f"queued position={event.position}"))
                        continue
                    if not isinstance(event, Delta | Finished):
                        continue  # Started
                    if stream and index not in opened:
                        opened.add(index)
                        out.append(shape.opening(index))
                    if isinstance(event, Delta):
                        if not stream:
                            answers[index].append(event)
                        elif event.channel != "content":
                            out.append(shape.part(event, index))
                        elif shape.scored:
                            out.append(shape.scored_delta(event, index))
                        else:
                            out.append(shape.delta(event.text, index))
                    else:
                        finals[index] = event
                        if stream:
                            out.append(shape.finish(event.reason.value, index))
            done = all(f is not None for f in finals)
            if not stream:
                if done:
                    await self._whole(answers, finals, send)
                    return
                continue
            if done:
                if self.include_usage:
                    out.append(shape.usage(total_usage([f.usage for f in finals if f])))
                out.append(sse.DONE)
            if await head.write(send, [b for b in out if b], done):
                return

    async def _whole(self, answers: list[list[Delta]], finals: list[Finished | None],
                     send: Send) -> None:
        ended = [f for f in finals if f is not None]
        body = self.shape.whole_of([(deltas, f.reason.value) for deltas, f in
                                    zip(answers, ended, strict=True)],
                                   total_usage([f.usage for f in ended]))
        response = Response(body.model_dump_json(), media_type="application/json")
        await response(self._scope, no_receive, send)

    async def _fail(self, event: Failed, send: Send, out: list[bytes], head: HeadFirst,
                    opened: bool) -> None:
        """One choice failed: the response ends with its error (an error status while no
        chunk was made, else an error event after the chunks); the others stop."""
        for session in self.sessions:
            session.cancel()
        if not (opened or head.sent):
            await error_response(event.error)(self._scope, no_receive, send)
            return
        await head.write(send, [*out, sse.data(error_body(event.error)), sse.DONE], True)


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
