"""Async Python client for tokenpipe.v1.

    async with Client("ws://127.0.0.1:8000/ws") as client:
        gen = await client.generate(messages=[{"role": "user", "content": "Hi"}])
        async for text in gen:
            print(text, end="", flush=True)
        print(gen.end["finish_reason"])

Several generations may run at once on one client; `await gen.cancel()` stops one.
A resumable generation (`resumable=True`) outlives its connection: when the connection
drops (a server restarting closes it with 1012), the client connects again, through the
same URL (a load balancer picks a replica), and resumes it from the last delta it got, for
up to `resume_s` seconds; the generation's frames go on as if nothing happened.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from ..protocol.ws import BEARER_PREFIX, PROTOCOL

__all__ = ["Client", "Generation", "ServerError"]


class ServerError(Exception):
    """An `error` frame: `.code`, `.message`, `.frame`."""

    def __init__(self, frame: Mapping[str, Any]) -> None:
        super().__init__(f"{frame.get('code')}: {frame.get('message')}")
        self.code = str(frame.get("code"))
        self.message = str(frame.get("message"))
        self.frame = dict(frame)


class Generation:
    """One generation: iterate it for text pieces (the answer's content); `start`, `end`
    and `deltas` hold frames; `tool_calls` the calls it made (with `tools` in params),
    `logprobs` its tokens' log-probabilities (with `logprobs` in params)."""

    def __init__(self, client: Client, gen_id: str) -> None:
        self.client = client
        self.id = gen_id
        self.frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.start: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self.error: ServerError | None = None
        self.deltas: list[dict[str, Any]] = []
        self.queued: list[int] = []  # queue positions heard, in order
        self.loaded_model = False  # it waited for its model to load (load on demand)
        self.progress: list[tuple[int, int]] = []  # a long prompt's (done, of) before text
        self.resumable = False
        self.stream: str | None = None  # its resume token, once the server said it
        self.last_seq = -1  # the last delta received (queued for the reader or read)
        self.resumes = 0  # how often the client resumed it on a new connection

    @property
    def text(self) -> str:
        """The content so far (not reasoning, not tool-call arguments)."""
        return "".join(d["text"] for d in self.deltas if d.get("channel", "content")
                       == "content")

    @property
    def logprobs(self) -> list[dict[str, Any]]:
        """The content tokens' log-probabilities so far (`logprobs: true` in params):
        [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]."""
        return [e for d in self.deltas if d.get("channel", "content") == "content"
                for e in d.get("logprobs", ())]

    @property
    def tool_calls(self) -> list[dict[str, str]]:
        """The calls so far: [{"id", "name", "arguments"}], arguments as JSON text."""
        calls: list[dict[str, str]] = []
        for d in self.deltas:
            if d.get("channel") == "tool_call":
                if "call_id" in d:
                    calls.append({"id": d["call_id"], "name": d["name"], "arguments": ""})
                calls[d["index"]]["arguments"] += d["text"]
        return calls

    async def cancel(self) -> None:
        await self.client.send({"type": "cancel", "id": self.id})

    def __aiter__(self) -> AsyncIterator[str]:
        return self._texts()

    async def _texts(self) -> AsyncIterator[str]:
        async for frame in self.parts():
            if frame.get("channel", "content") == "content":
                yield frame["text"]

    async def parts(self) -> AsyncIterator[dict[str, Any]]:
        """Every delta frame as it comes, of every channel (content, and with the params
        that ask for them reasoning and tool_call), until the end."""
        while self.end is None and self.error is None:
            frame = await self.frames.get()
            kind = frame["type"]
            if kind == "delta":
                self.deltas.append(frame)
                yield frame
            elif kind == "start":
                self.start = frame
            elif kind == "progress":
                self.progress.append((frame["prompt_tokens_done"], frame["prompt_tokens"]))
            elif kind == "queued":
                if frame.get("loading"):
                    self.loaded_model = True
                else:
                    self.queued.append(frame["position"])
            elif kind == "end":
                self.end = frame
            elif kind == "error":
                self.error = ServerError(frame)
                raise self.error
            elif kind == "closed":
                self.error = ServerError({"code": "connection_closed",
                                          "message": "the connection closed mid-stream"})
                raise self.error

    async def collect(self) -> str:
        async for _ in self:
            pass
        return self.text


class Client:
    def __init__(
        self,
        url: str = "ws://127.0.0.1:8000/ws",
        *,
        api_key: str | None = None,
        max_size: int | None = 16 * 1024 * 1024,
        open_timeout: float = 30.0,
        resume_s: float = 30.0,
    ) -> None:
        self.url = url
        self.resume_s = resume_s  # how long to try resuming after a drop; 0: never
        self.api_key = api_key
        self.max_size = max_size
        self.open_timeout = open_timeout
        self.hello: dict[str, Any] = {}
        self.pongs: asyncio.Queue[Any] = asyncio.Queue()
        self.errors: asyncio.Queue[dict[str, Any]] = asyncio.Queue()  # errors with id null
        self._ws: ClientConnection | None = None
        self._gens: dict[str, Generation] = {}
        self._reader: asyncio.Task[None] | None = None
        self._reconnect: asyncio.Task[None] | None = None
        self._closing = False
        self._ids = itertools.count()

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        self._ws = await websockets.connect(
            self.url, subprotocols=[PROTOCOL],  # type: ignore[list-item]
            additional_headers=headers, max_size=self.max_size, open_timeout=self.open_timeout,
        )
        self.hello = json.loads(await self._ws.recv())
        self._reader = asyncio.create_task(self._read())

    async def close(self) -> None:
        self._closing = True
        if self._reconnect is not None:
            self._reconnect.cancel()
            await asyncio.gather(self._reconnect, return_exceptions=True)
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def send(self, frame: Mapping[str, Any]) -> None:
        assert self._ws is not None, "not connected"
        await self._ws.send(json.dumps(frame, ensure_ascii=False))

    async def send_raw(self, data: str | bytes) -> None:
        assert self._ws is not None, "not connected"
        await self._ws.send(data)

    async def generate(
        self,
        messages: Sequence[Mapping[str, str]] | None = None,
        *,
        prompt: str | None = None,
        params: Mapping[str, Any] | None = None,
        model: str | None = None,
        resumable: bool = False,
        id: str | None = None,
    ) -> Generation:
        gen_id = id or f"g{next(self._ids)}"
        frame: dict[str, Any] = {"type": "generate", "id": gen_id}
        if messages is not None:
            frame["messages"] = list(messages)
        if prompt is not None:
            frame["prompt"] = prompt
        if params:
            frame["params"] = dict(params)
        if model:
            frame["model"] = model
        if resumable:
            frame["resumable"] = True
        gen = Generation(self, gen_id)
        gen.resumable = resumable
        self._gens[gen_id] = gen
        await self.send(frame)
        return gen

    async def resume(self, stream: str, after_seq: int, id: str) -> Generation:
        gen = Generation(self, id)
        gen.resumable, gen.stream, gen.last_seq = True, stream, after_seq
        self._gens[id] = gen
        await self.send({"type": "resume", "stream": stream, "after_seq": after_seq, "id": id})
        return gen

    async def ping(self, data: Any = None) -> Any:
        await self.send({"type": "ping", "data": data})
        return await self.pongs.get()

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                frame = json.loads(raw)
                kind = frame.get("type")
                if kind == "pong":
                    self.pongs.put_nowait(frame.get("data"))
                    continue
                gen = self._gens.get(frame.get("id") or "")
                if gen is None:
                    self.errors.put_nowait(frame)
                    continue
                if kind == "delta":
                    gen.last_seq = frame["seq"]
                elif kind == "start" and frame.get("stream"):
                    gen.stream = frame["stream"]
                gen.frames.put_nowait(frame)
                if kind == "end" or (kind == "error" and frame["code"] not in
                                     ("duplicate_id", "unknown_id")):
                    self._gens.pop(gen.id, None)
        except websockets.ConnectionClosed:
            pass
        finally:
            self._dropped()

    def _dropped(self) -> None:
        """The connection is gone: resumable generations are resumed on a new one (by
        the reconnect task), the others end with `closed`."""
        keep = {} if self._closing or self.resume_s <= 0 else {
            i: g for i, g in self._gens.items() if g.resumable and g.stream is not None}
        for gen in self._gens.values():
            if gen.id not in keep:
                gen.frames.put_nowait({"type": "closed", "id": gen.id})
        self._gens = keep
        if keep:
            self._reconnect = asyncio.get_running_loop().create_task(self._resume_all())

    async def _resume_all(self) -> None:
        """Connects again (backing off from 50 ms to 1 s) until `resume_s` has passed, then
        resumes every resumable generation after its last delta."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + self.resume_s, 0.05
        while True:
            try:
                await self.connect()
                break
            except (OSError, websockets.WebSocketException, TimeoutError):
                if loop.time() + pause > deadline:
                    for gen in self._gens.values():
                        gen.frames.put_nowait({"type": "closed", "id": gen.id})
                    self._gens = {}
                    return
                await asyncio.sleep(pause)
                pause = min(1.0, pause * 2)
        for gen in list(self._gens.values()):
            gen.resumes += 1
            await self.send({"type": "resume", "stream": gen.stream,
                             "after_seq": gen.last_seq, "id": gen.id})


def bearer_subprotocol(api_key: str) -> str:
    """The subprotocol that carries an API key for clients that cannot set headers."""
    return BEARER_PREFIX + base64.urlsafe_b64encode(api_key.encode()).decode().rstrip("=")
