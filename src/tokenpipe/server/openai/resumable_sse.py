"""Resumable Chat Completions / Completions SSE (docs/protocol.md, "Resumable Chat
Completions"): a streamed request that opts in gets `X-Stream-Token` and an SSE `id:` on
every event; after a drop, `GET /v1/streams/TOKEN` with `Last-Event-ID: N` sends the
events after N. The sessions live in the one resume store (server/resumable.py) and
are read through its take-over, as tokenpipe.v1's `resume` reads them, so a token from
either door resumes over the other.

Event ids are a function of the session's kept deltas alone, so every reader numbers them
alike: the chat opening chunk is 0, the delta of seq s is s + 1, the finish chunk (or the
error event) D + 1 after D deltas, the usage chunk D + 2; `[DONE]` and comments have none.
A request that does not opt in is served by SessionResponse, unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Send

from ...errors import BadRequest, TokenpipeError
from ...protocol import sse
from ...protocol.openai.errors import OpenAIError, error_body
from ...protocol.openai.render import ChatRender, CompletionRender
from ...session import Cursor, Delta, Event, Failed, Finished, GenerationSession
from ..door_response import SSE_HEADERS, DoorResponse, HeadFirst, Reading
from ..resumable import Held, ResumeStore
from .session_response import error_response

Shape = ChatRender | CompletionRender
_ON, _OFF = ("1", "true", "yes"), ("0", "false", "no", "")
_EVENT_ID = re.compile(r"-?[0-9]{1,18}")  # ASCII digits; longer is beyond any stream


@dataclass(frozen=True)
class SseOrigin:
    """How one resumable stream is rendered, kept on its Held record: the same chunk id,
    created and model on every resume."""

    shape: Shape
    include_usage: bool = False


def opted_in(resumable: bool | None, stream: bool, header: str | None) -> bool:
    """Whether a request wants a resumable stream: the body's `resumable` (validated with
    the body), else the `X-Resumable` header, which counts for streamed requests only (a
    client may set it on all its requests)."""
    if resumable is not None:
        return resumable
    if header is None or not stream:
        return False
    value = header.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise OpenAIError(f"Invalid value for header 'X-Resumable': {header[:40]!r}; send 1 or 0.",
                      param="X-Resumable", openai_code="invalid_value")


def started(streams: ResumeStore, session: GenerationSession, shape: Shape, *,
            include_usage: bool, ping_s: float) -> ResumableResponse:
    """The answer to the POST that started a resumable session: it is kept in the store
    (its v1 id, for a `resume` without one, is the chunk id) and streamed from the start."""
    origin = SseOrigin(shape, include_usage)
    held = Held(session, str(shape.head["id"]), sse=origin)
    streams.keep(held)
    return ResumableResponse(held, streams, origin, last=None, ping_s=ping_s)


async def resumed(streams: ResumeStore, token: str, header: str | None, query: str | None,
                  ping_s: float) -> Response:
    """The answer to `GET /v1/streams/TOKEN`: the events after Last-Event-ID (the header,
    which a browser's EventSource sends on reconnecting, wins over `?last_event_id=`)."""
    raw = (header if header is not None else query or "").strip()
    valid = not raw or _EVENT_ID.fullmatch(raw)  # int() would take "+3", "3_0" and "٣" too
    last = int(raw) if raw and valid else None
    # event id N is the delta of seq N - 1 (a replica replaying the stream waits for it)
    held = await streams.find(token, -1 if last is None else last - 1)
    if held is None:  # an unknown token is a 404 whatever the header says
        return error_response(OpenAIError(
            "No resumable stream with that token: unknown, or its grace period ended.",
            param=None, openai_code="stream_not_found", status=404))
    if not valid:
        return error_response(BadRequest(
            f"Last-Event-ID must be an event id (an integer), not {raw[:40]!r}",
            param="last_event_id"))
    origin = held.sse if isinstance(held.sse, SseOrigin) else _of_v1(held)
    if last is not None and not -1 <= last <= _last_sent(held.session, origin):
        return error_response(BadRequest(
            f"Last-Event-ID {last} is not an event this stream has sent (so far it sent "
            f"ids up to {_last_sent(held.session, origin)})", param="last_event_id"))
    return ResumableResponse(held, streams, origin, last=last, ping_s=ping_s)


def _of_v1(held: Held) -> SseOrigin:
    """A stream a tokenpipe.v1 `generate` started, as Chat Completions chunks from now on."""
    session = held.session
    scored = not session.loading and session.prepared.request.params.logprobs is not None
    held.sse = origin = SseOrigin(ChatRender(session.model, scored=scored))
    return origin


def _last_sent(session: GenerationSession, origin: SseOrigin) -> int:
    """The highest event id any reader can have been sent so far."""
    if session.final is None:
        return session.next_seq  # the delta of seq next_seq - 1
    usage = origin.include_usage and isinstance(session.final, Finished)
    return session.next_seq + (2 if usage else 1)


class _Moved(Exception):
    """A resume elsewhere took the stream over while this response waited for events."""


class ResumableResponse(DoorResponse):
    """One reader of a held session, as SSE with event ids: the events with id above
    `last` (None: from the start). Its client leaving does not cancel the generation: the
    store's grace period starts. A resume elsewhere takes it over (as v1's does): this
    stream then ends with an error event `code: moved`."""

    progress = True  # `: prefill N/M` comments, before the first delta

    def __init__(self, held: Held, streams: ResumeStore, origin: SseOrigin, *,
                 last: int | None, ping_s: float) -> None:
        super().__init__(held.session, stream=True, ping_s=ping_s)
        self.held, self.streams, self.origin = held, streams, origin
        self.last = -1 if last is None else last
        self._opened = self.last >= 0  # the client has seen the opening chunk (id 0)
        self._moved = False
        self._cursor: Cursor | None = None
        token = held.session.stream_token
        assert token is not None
        self._head = HeadFirst([*SSE_HEADERS, (b"x-stream-token", token.encode())])

    def moved(self, session: GenerationSession, new_id: str | None = None) -> None:
        self._moved = True
        if self._cursor is not None:
            self._cursor.wake()

    def _reader(self) -> Cursor:
        session = self.session
        assert session.stream_token is not None
        after = max(-1, min(self.last - 1, session.next_seq - 1))  # delta s has id s + 1
        if self.streams.get(session.stream_token) is None:  # its grace ended since the GET
            self.streams.keep(self.held)  # (it was cancelled): this reader reads its end
        self._cursor = self.streams.take_over(session.stream_token, after, self,
                                              progress=True)
        return self._cursor

    def _leave(self, cursor: Reading) -> None:
        if self.held.reader is self:
            self.streams.orphan(self.session)  # kept for the grace period, then cancelled
        else:
            cursor.close()

    async def _events(self, cursor: Reading, out: list[bytes]) -> list[Any]:
        batch = await super()._events(cursor, out)
        if self._moved:
            raise _Moved
        return batch

    async def _stream(self, cursor: Reading, send: Send) -> None:
        try:
            await super()._stream(cursor, send)
        except _Moved:
            moved = OpenAIError("A resume of this stream elsewhere took it over.",
                                param=None, openai_code="moved", status=409)
            if not self._head.sent:
                return await self._refuse(moved, send)
            await self._head.write(send, [sse.data(error_body(moved))], True)

    def _emit(self, event_id: int, chunk: bytes) -> bytes:
        return b"id: %d\n" % event_id + chunk if chunk and event_id > self.last else b""

    def _opening(self, event: Event) -> bytes:
        return self._emit(0, self.origin.shape.opening())

    def _delta(self, event: Delta) -> bytes:
        shape = self.origin.shape
        if event.channel != "content":
            chunk = shape.part(event)
        elif shape.ids:  # the prompt's ids with the stream's first delta
            chunk = shape.ids_delta(event, prompt=self.session.prompt_ids
                                    if event.seq == 0 else None)
        elif shape.scored:
            chunk = shape.scored_delta(event)
        else:
            chunk = shape.delta(event.text)
        return self._emit(event.seq + 1, chunk)

    async def _closing(self, end: Finished | Failed) -> bytes:
        end_id = self.session.next_seq + 1  # every delta is sealed by now
        if isinstance(end, Failed) and self.streams.hands_over(self.session):
            return b""  # no end: the client resumes on another replica (Last-Event-ID)
        if isinstance(end, Failed):
            return self._emit(end_id, sse.data(error_body(end.error))) + sse.DONE
        shape = self.origin.shape
        out = self._emit(end_id, shape.finish(end.reason.value))
        if self.origin.include_usage:
            out += self._emit(end_id + 1, shape.usage(end.usage))
        return out + sse.DONE

    def error_response(self, exc: TokenpipeError) -> Response:
        return error_response(exc)

    async def _whole(self, cursor: Reading, send: Send) -> None:
        raise AssertionError("a resumable answer is always streamed")
