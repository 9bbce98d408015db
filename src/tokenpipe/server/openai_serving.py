"""Serving one OpenAI request from its GenerationSession, as an ASGI response.

The response races the session's events against the client's disconnect in one task group
(the pattern of starlette's StreamingResponse); whichever ends first cancels the other, and
a generation whose client left is cancelled at once, so its compute stops at the next step.

Headers wait for the first thing worth saying: the first text, the end, a failure, a queue
position or a due ping. So a failure before the first token (an engine fault at prefill, a
shutdown) is a proper HTTP status; after the first chunk it is one `data: {"error": ...}`
event, then `data: [DONE]`. A request that has to wait for capacity commits to 200 and
hears `: queued position=N` comment lines (SSE clients, the OpenAI SDKs too, skip them).
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from typing import Any

from pydantic import BaseModel
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ..errors import TokenpipeError
from ..protocol.openai import (
    SSE_DONE,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    ChunkDelta,
    Completion,
    PromptTokensDetails,
    TextChoice,
    UsageInfo,
    error_body,
    now,
    sse_comment,
    sse_data,
)
from ..session import Cursor, Delta, Event, Failed, Finished, GenerationSession, Queued
from ..types import Usage

PING_INTERVAL_S = 15.0  # default of Settings.sse_ping_interval_s
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
]


def error_response(exc: TokenpipeError) -> Response:
    headers = {}
    if exc.retry_after_ms is not None:
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after_ms / 1000)))
        headers["retry-after-ms"] = str(exc.retry_after_ms)  # the OpenAI SDKs honour it
    return JSONResponse(error_body(exc), status_code=exc.status, headers=headers)


def _usage(usage: Usage) -> UsageInfo:
    return UsageInfo(prompt_tokens=usage.prompt_tokens,
                     completion_tokens=usage.completion_tokens,
                     total_tokens=usage.total_tokens,
                     prompt_tokens_details=PromptTokensDetails(
                         cached_tokens=usage.cached_tokens))


# The per-token chunk is the one hot path: built once through its pydantic model with a
# marker for the text, then filled in by string joins (pydantic per token cost ~30 µs).
_MARK = "\u0001tokenpipe-text\u0001"


def _template(chunk: bytes) -> tuple[bytes, bytes]:
    marker = json.dumps(_MARK).encode()
    before, found, after = chunk.partition(marker)
    if not found:
        raise RuntimeError("chunk template without its text marker")
    return before, after


def _fill(around: tuple[bytes, bytes], text: str) -> bytes:
    return around[0] + json.dumps(text, ensure_ascii=False).encode() + around[1]


class ChatRender:
    """chat.completion / chat.completion.chunk objects of one answer."""

    def __init__(self, model: str) -> None:
        self.head: dict[str, Any] = {"id": "chatcmpl-" + secrets.token_hex(12),
                                     "created": now(), "model": model}
        self._around: tuple[bytes, bytes] | None = None

    def _chunk(self, choice: ChunkChoice | None, usage: Usage | None = None) -> bytes:
        return sse_data(ChatCompletionChunk(
            **self.head, choices=[] if choice is None else [choice],
            usage=None if usage is None else _usage(usage)))

    def opening(self) -> bytes:
        return self._chunk(ChunkChoice(delta=ChunkDelta(role="assistant", content="")))

    def delta(self, text: str) -> bytes:
        if self._around is None:
            self._around = _template(self._chunk(ChunkChoice(delta=ChunkDelta(content=_MARK))))
        return _fill(self._around, text)

    def finish(self, reason: str) -> bytes:
        return self._chunk(ChunkChoice(delta=ChunkDelta(), finish_reason=reason))  # type: ignore[arg-type]

    def usage(self, usage: Usage) -> bytes:
        return self._chunk(None, usage)

    def whole(self, text: str, reason: str, usage: Usage) -> BaseModel:
        return ChatCompletion(**self.head, usage=_usage(usage), choices=[ChatChoice(
            message=AssistantMessage(content=text), finish_reason=reason)])  # type: ignore[arg-type]


class CompletionRender:
    """text_completion objects of one answer (streamed chunks have the same shape)."""

    def __init__(self, model: str) -> None:
        self.head: dict[str, Any] = {"id": "cmpl-" + secrets.token_hex(12),
                                     "created": now(), "model": model}
        self._around: tuple[bytes, bytes] | None = None

    def _chunk(self, choices: list[TextChoice], usage: Usage | None = None) -> bytes:
        return sse_data(Completion(**self.head, choices=choices,
                                   usage=None if usage is None else _usage(usage)))

    def opening(self) -> bytes:
        return b""

    def delta(self, text: str) -> bytes:
        if self._around is None:
            self._around = _template(self._chunk([TextChoice(text=_MARK)]))
        return _fill(self._around, text)

    def finish(self, reason: str) -> bytes:
        return self._chunk([TextChoice(text="", finish_reason=reason)])  # type: ignore[arg-type]

    def usage(self, usage: Usage) -> bytes:
        return self._chunk([], usage)

    def whole(self, text: str, reason: str, usage: Usage) -> BaseModel:
        return Completion(**self.head, usage=_usage(usage), choices=[TextChoice(
            text=text, finish_reason=reason)])  # type: ignore[arg-type]


Shape = ChatRender | CompletionRender  # the OpenAI objects of one answer


class SessionResponse(Response):
    """The ASGI response of one generation: SSE when `stream`, else one JSON object. Its
    status and headers are decided by the session's first events, not up front."""

    def __init__(self, session: GenerationSession, shape: Shape, *, stream: bool,
                 include_usage: bool = False, ping_s: float = PING_INTERVAL_S) -> None:
        self.session = session
        self.shape = shape
        self.stream = stream
        self.include_usage = include_usage
        self.ping_s = ping_s if ping_s > 0 else None  # 0: no pings
        self._wake = asyncio.Event()
        self._gone = False  # the client disconnected
        self._ping: asyncio.TimerHandle | None = None
        self._active = 0.0  # loop time of the last wait for events (pings: idle since)
        self._idle = False  # the ping timer found ping_s seconds without events
        self._scope: Scope = {"type": "http"}
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._scope = scope
        self.session.attach(self._wake.set)
        # The client's disconnect is watched by one plain task that wakes the writer (a
        # task group with cancel scopes cost a tenth of the hop's CPU per request).
        watcher = asyncio.get_running_loop().create_task(self._watch(receive))
        try:
            await (self._stream(send) if self.stream else self._whole(send))
        except (OSError, _ClientGone):  # the client went away (while we wrote)
            pass
        finally:
            watcher.cancel()
            if self._ping is not None:
                self._ping.cancel()
            self.session.attach(None)
            self.session.cancel()  # a no-op once it ended; else its client left: stop it
        if self.background is not None:
            await self.background()

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._gone = True
        self._wake.set()

    def _ping_due(self) -> None:
        """The ping timer: armed once, moved on lazily (a token only notes its time)."""
        assert self.ping_s is not None
        loop = asyncio.get_running_loop()
        due = self._active + self.ping_s
        if loop.time() >= due:
            self._ping = None
            self._idle = True
            self._wake.set()
        else:
            self._ping = loop.call_at(due, self._ping_due)

    async def _events(self, cursor: Cursor, pings: bool) -> list[Event]:
        """The next events; an empty list when nothing happened for ping_s seconds."""
        if pings and self.ping_s is not None:
            loop = asyncio.get_running_loop()
            self._active = loop.time()
            self._idle = False
            if self._ping is None:
                self._ping = loop.call_at(self._active + self.ping_s, self._ping_due)
        while True:
            self._wake.clear()
            if self._gone:
                raise _ClientGone
            batch = cursor.poll()
            if batch:
                return batch
            if pings and self._idle:
                self._idle = False
                return []
            await self._wake.wait()

    async def _stream(self, send: Send) -> None:
        cursor = self.session.cursor()
        shape = self.shape
        headers_sent = opened = False
        while True:
            out: list[bytes] = []
            ended = False
            batch = await self._events(cursor, True)
            if not batch:
                out.append(sse_comment("ping"))
            for event in batch:
                if isinstance(event, Queued):
                    out.append(sse_comment(f"queued position={event.position}"))
                elif isinstance(event, Delta | Finished) and not opened:
                    opened = True
                    out.append(shape.opening())
                if isinstance(event, Delta):
                    out.append(shape.delta(event.text))
                elif isinstance(event, Finished):
                    out.append(shape.finish(event.reason.value))
                    if self.include_usage:
                        out.append(shape.usage(event.usage))
                    out.append(SSE_DONE)
                    ended = True
                elif isinstance(event, Failed):
                    if not opened and not headers_sent:
                        await error_response(event.error)(self._scope, _no_receive, send)
                        return
                    out += [sse_data(error_body(event.error)), SSE_DONE]
                    ended = True
            if not out:
                continue  # Started alone: nothing to say yet, so no headers yet either
            if not headers_sent:
                headers_sent = True
                await send({"type": "http.response.start", "status": 200,
                            "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": b"".join(out),
                        "more_body": not ended})
            if ended:
                return

    async def _whole(self, send: Send) -> None:
        cursor = self.session.cursor()
        parts: list[str] = []
        while True:
            for event in await self._events(cursor, False):
                if isinstance(event, Delta):
                    parts.append(event.text)
                elif isinstance(event, Finished):
                    body = self.shape.whole("".join(parts), event.reason.value, event.usage)
                    response: Response = Response(body.model_dump_json(),
                                                  media_type="application/json")
                    await response(self._scope, _no_receive, send)
                    return
                elif isinstance(event, Failed):
                    await error_response(event.error)(self._scope, _no_receive, send)
                    return


class _ClientGone(Exception):
    """The client disconnected: the response ends, and with it the generation."""


async def _no_receive() -> Any:  # plain responses never read; the race owns receive
    raise RuntimeError("a plain response does not read the request")
