"""/ws without a subprotocol: the original article's plain-text mode (docs/protocol.md
section 2), one message answered at a time."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.websockets import WebSocket

from ...errors import BadRequest, TokenpipeError
from ...session import Delta, Failed, GenerationSession
from ...types import GenerationRequest, Message, SamplingParams
from ..race import race
from ..runtime import Runtime
from .frame_sink import FrameSink, clean

log = logging.getLogger("tokenpipe.ws")
END_TEXT = "<|ENDTEXT|>"


class PlainConnection:
    """The original article's protocol: a text frame in is one user message; text frames
    of the answer out, then exactly END_TEXT. Messages are answered one at a time; while
    one is answered at most one more is read, the rest wait in the client's TCP buffer."""

    def __init__(self, websocket: WebSocket, runtime: Runtime) -> None:
        self.ws = websocket
        self.runtime = runtime
        self.inbox: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        self.sink = FrameSink(websocket)

    async def run(self) -> None:
        await self.ws.accept()
        self.runtime.connections.add(self)
        self.busy = False
        self.idle = asyncio.Event()
        try:
            await race(self._reader(), self._answer_all())
        finally:
            self.runtime.connections.discard(self)
            await self._close(1000)

    async def close_when_flushed(self, code: int, deadline_s: float = 5.0) -> None:
        if self.busy:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.idle.wait(), deadline_s)
        await self._close(code, "server shutting down")
        self.sink.abort_later(1.0)

    def abort(self) -> None:
        self.sink.abort()

    async def _close(self, code: int, reason: str = "") -> None:
        try:
            async with asyncio.timeout(1.0):  # the close frame queues behind unread data
                await self.ws.close(code=code, reason=reason)
        except TimeoutError:
            self.sink.abort()
        except Exception:  # closed already, or the client is gone
            pass

    async def _reader(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                text = (message.get("bytes") or b"").decode("utf-8", errors="replace")
            await self.inbox.put(text)

    async def _answer_all(self) -> None:
        while True:
            text = await self.inbox.get()
            self.busy = True
            self.idle.clear()
            try:
                await self._answer(text)
            except TimeoutError:
                log.warning("plain client stopped reading for %.0f s; dropping it",
                            self.runtime.settings.slow_client_timeout_s)
                self.sink.abort()
                return
            finally:
                self.busy = False
                self.idle.set()

    async def _send(self, text: str) -> None:
        async with asyncio.timeout(self.runtime.settings.slow_client_timeout_s):
            await self.ws.send_text(clean(text))

    async def _answer(self, text: str) -> None:
        session: GenerationSession | None = None
        try:
            if not text.strip():
                raise BadRequest("empty message")
            if len(text.encode()) > self.runtime.settings.max_message_bytes:
                raise BadRequest("message exceeds max_message_bytes")
            request = GenerationRequest(messages=(Message("user", text),), params=SamplingParams())
            session = await self.runtime.models.start(request, api="plain")
            async for event in session.cursor():
                if isinstance(event, Delta):
                    await self._send(event.text)
                elif isinstance(event, Failed):
                    await self._send(f"\n[error {event.error.code}: {event.error.message}]")
        except TokenpipeError as exc:
            await self._send(f"[error {exc.code}: {exc.message}]")
        finally:
            if session is not None and session.final is None:
                session.cancel()
        await self._send(END_TEXT)
