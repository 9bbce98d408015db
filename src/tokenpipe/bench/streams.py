"""One run: N streams against a server (over WebSocket or an HTTP door, in this process or spread
over several), started together, and the server's CPU time read around them."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from .metrics import server_cpu, server_rss
from .results import RunResult, StreamResult


class StartLine:
    """The N streams of a run connect first, then all send their requests in the same loop
    turn: otherwise each one starts when its own connection is ready, so a server slower
    to answer the untimed set-up (the WebSocket handshake, the SSE client's first GET)
    spreads the burst it then gets, and an engine that admits new requests once per
    decode step (llama-server) starts part of a wider-spread burst a step later."""

    def __init__(self, n: int) -> None:
        self.waiting = n
        self._go: list[Any] = []

    def arrive(self, go: Any) -> None:
        """`go()` runs once every stream has arrived (or left)."""
        self._go.append(go)
        self._arrived()

    def leave(self) -> None:
        """A stream that failed before the line: the others do not wait for it."""
        self._arrived()

    def _arrived(self) -> None:
        self.waiting -= 1
        if self.waiting <= 0:
            go, self._go = self._go, []
            for start in go:
                start()

    async def wait(self) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def go() -> None:
            if not future.done():
                future.set_result(None)

        self.arrive(go)
        await future


async def server_run(label: str, api: str, url: str, args: argparse.Namespace,
                     messages: list[dict[str, str]]) -> RunResult:
    cpu0 = await server_cpu(url)
    t0 = time.perf_counter()
    if args.procs <= 1:
        streams = await _streams(api, url, args, messages, args.concurrency)
    else:
        from concurrent.futures import ProcessPoolExecutor

        loop = asyncio.get_running_loop()
        share = [args.concurrency // args.procs + (i < args.concurrency % args.procs)
                 for i in range(args.procs)]
        with ProcessPoolExecutor(args.procs) as pool:
            parts = await asyncio.gather(*(loop.run_in_executor(
                pool, _streams_in_process, api, url, args, messages, n) for n in share if n))
        streams = [s for part in parts for s in part]
    wall = time.perf_counter() - t0
    cpu1 = await server_cpu(url)
    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    return RunResult(label, list(streams), wall, cpu, await server_rss(url))


async def _streams(api: str, url: str, args: argparse.Namespace,
                   messages: list[dict[str, str]], n: int) -> list[StreamResult]:
    # Imported by API: the HTTP load needs neither websockets nor the protocol's models.
    line = StartLine(n)
    if api == "ws":
        from .ws_load import ws_stream

        streams = [ws_stream(url, args, messages, line) for _ in range(n)]
    else:
        from .sse_load import http_stream

        streams = [http_stream(api, url, args, messages, line) for _ in range(n)]
    return list(await asyncio.gather(*streams))


def _streams_in_process(api: str, url: str, args: argparse.Namespace,
                        messages: list[dict[str, str]], n: int) -> list[StreamResult]:
    return asyncio.run(_streams(api, url, args, messages, n))
