"""The WebSocket load: tokenpipe.v1 streams on websockets' sans-I/O protocol, and the
server's memory per idle connection (--idle)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import websockets
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from ..client import bearer_subprotocol
from ..protocol.ws import PROTOCOL
from .metrics import metric
from .results import StreamResult

if TYPE_CHECKING:
    from .streams import StartLine


class _WsLoad(asyncio.Protocol):
    """One tokenpipe.v1 stream with no task or queue per frame: a load generator must cost
    far less per delta than the server it measures."""

    def __init__(self, url: str, api_key: str | None, request: dict[str, Any],
                 result: StreamResult, line: StartLine) -> None:
        subprotocols = [Subprotocol(PROTOCOL)]
        if api_key:
            subprotocols.append(Subprotocol(bearer_subprotocol(api_key)))
        self.ws = ClientProtocol(parse_uri(url), subprotocols=subprotocols)
        self.request = json.dumps(request)
        self.result = result
        self.line: StartLine | None = line  # None once arrived
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.ws.send_request(self.ws.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        self.ws.receive_data(data)
        for event in self.ws.events_received():
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                self._frame(json.loads(bytes(event.data)))
            elif isinstance(event, Response) and event.status_code != 101:
                self._end(f"http {event.status_code}")
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end("connection_closed")

    def _frame(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "delta":
            self.result.arrived()
        elif kind == "hello" and self.line is not None:
            line, self.line = self.line, None
            line.arrive(self._go)
        elif kind == "end":
            self.result.stop()
            self.result.tokens = frame["usage"]["completion_tokens"]
            self._end(None)
        elif kind == "error":
            self._end(str(frame.get("code")))

    def _go(self) -> None:
        if not self.done.done():
            self.result.start()
            self.ws.send_text(self.request.encode())
            self._flush()

    def _end(self, error: str | None) -> None:
        if self.line is not None:  # failed before the start line
            line, self.line = self.line, None
            line.leave()
        if not self.done.done():
            if error is not None:
                self.result.error = error
            self.done.set_result(None)
            self.ws.send_close(1000)
            self._flush()
            if self.transport is not None:
                self.transport.close()

    def _flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            data = b"".join(self.ws.data_to_send())
            if data:
                self.transport.write(data)


async def ws_stream(url: str, args: argparse.Namespace,
                    messages: list[dict[str, str]], line: StartLine) -> StreamResult:
    """Opens the connection, then the clock starts when the server says hello."""
    result = StreamResult()
    params: dict[str, Any] = {"max_tokens": args.max_tokens, "temperature": 0.0}
    if getattr(args, "response_format", None) is not None:
        params["response_format"] = args.response_format
    if getattr(args, "tool_list", None) is not None:
        params.update(tools=args.tool_list, tool_choice="required")
    request: dict[str, Any] = {"type": "generate", "id": "bench", "messages": messages,
                               "params": params}
    if getattr(args, "resumable", False):
        request["resumable"] = True
    parts = urlsplit(url)
    if parts.scheme != "ws" or not parts.hostname:
        raise SystemExit(f"bench over WebSocket needs a ws://HOST:PORT/ws URL, not {url!r}")
    loop = asyncio.get_running_loop()
    try:
        _, proto = await loop.create_connection(
            lambda: _WsLoad(url, args.api_key, request, result, line), parts.hostname,
            parts.port or 80)
    except BaseException:
        line.leave()
        raise
    await proto.done
    return result


async def idle_connections(args: argparse.Namespace) -> int:
    """Opens N connections that only say hello, and reads the server's RSS from /metrics."""
    name = "process_resident_memory_bytes"
    before = await metric(args.url, name) or float("nan")
    sockets = []
    for _ in range(args.idle):
        ws = await websockets.connect(args.url, subprotocols=[Subprotocol(PROTOCOL)])
        await ws.recv()
        sockets.append(ws)
    await asyncio.sleep(1.0)
    after = await metric(args.url, name) or float("nan")
    await asyncio.gather(*(ws.close() for ws in sockets))
    grown = (after - before) / 1e6
    print(f"{args.idle} idle connections: server RSS {before / 1e6:.1f} MB -> "
          f"{after / 1e6:.1f} MB (+{grown:.1f} MB, {grown * 1000 / args.idle:.1f} MB per 1,000)")
    return 0
