"""What the attack tests share: a bystander stream that must not notice the attack, and
the server's resident memory read from /proc.

    with running(ServerProcess(("--engine", "fake"))) as server:
        async with Bystander(server.ws_url) as bystander:
            ...  # the attack, bounded in count and time, loopback only
        bystander.check()              # contiguous seq, the exact text, an end frame
        assert bystander.worst_stall_s < 0.5
        assert rss_mb(server) - baseline < 50

The bystander is a paced fake-engine generation (`pace_ms` per token) on its own
connection; its stall is the longest gap between two deltas beyond the pace. The text it
must receive is the fake engine's script for that many tokens, fetched once without any
attack going on (a non-streamed HTTP request with the same prompt).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import time
from types import TracebackType
from typing import Any

import httpx
import websockets


def rss_mb(server: Any) -> float:
    """The server process's resident set size in MiB (Linux /proc)."""
    pid = server.proc.pid if hasattr(server, "proc") else int(server)
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line")


class Bystander:
    """One honest tokenpipe.v1 client streaming while something hostile happens."""

    def __init__(self, ws_url: str, *, tokens: int = 300, pace_ms: float = 10.0) -> None:
        self.ws_url = ws_url
        self.http_url = ws_url.replace("ws://", "http://", 1).rsplit("/ws", 1)[0]
        self.tokens = tokens
        self.pace_s = pace_ms / 1000
        self.prompt = f"[[tokens={tokens}]][[pace_ms={pace_ms:g}]]"
        self.frames: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.expected = ""
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()

    async def __aenter__(self) -> Bystander:
        async with httpx.AsyncClient(timeout=60) as http:
            r = await http.post(self.http_url + "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"[[tokens={self.tokens}]]"}],
                "max_tokens": self.tokens})
            r.raise_for_status()
            self.expected = r.json()["choices"][0]["message"]["content"]
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._started.wait(), 30)
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._task is not None
        await asyncio.wait_for(self._task, 60 + self.tokens * self.pace_s * 4)

    async def _run(self) -> None:
        async with websockets.connect(self.ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                      open_timeout=30, max_size=None) as ws:
            hello = json.loads(await ws.recv())
            assert hello["type"] == "hello", hello
            await ws.send(json.dumps({"type": "generate", "id": "bystander", "messages": [
                {"role": "user", "content": self.prompt}], "params": {
                    "max_tokens": self.tokens}}))
            async for raw in ws:
                frame = json.loads(raw)
                self.frames.append(frame)
                self.arrivals.append(time.monotonic())
                if frame["type"] == "delta" and not self._started.is_set():
                    self._started.set()
                if frame["type"] in ("end", "error"):
                    self._started.set()
                    return

    @property
    def deltas(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == "delta"]

    @property
    def worst_stall_s(self) -> float:
        """The longest gap between consecutive deltas, less the pace itself."""
        times = [t for f, t in zip(self.frames, self.arrivals, strict=True)
                 if f["type"] == "delta"]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return max(0.0, max(gaps, default=0.0) - self.pace_s)

    def check(self) -> None:
        """Every delta in order, none lost or repeated, the exact text, one end frame."""
        seqs = [d["seq"] for d in self.deltas]
        assert seqs == list(range(len(seqs))), f"seq gaps or repeats: {seqs[:50]}"
        assert self.frames and self.frames[-1]["type"] == "end", self.frames[-3:]
        assert "".join(d["text"] for d in self.deltas) == self.expected


def stream_apart(ws_url: str, tokens: int, pace_ms: float, started: Any, out: Any) -> None:
    """A Bystander in a process of its own (multiprocessing's spawn): what the attacking
    test costs its own process (its GIL, its loop) is then not read as the server's stall.
    Sets `started` at the first delta; puts (frames, arrivals, expected) or an error's text
    on `out`. The arrivals are time.monotonic, one clock for every process here."""

    async def run() -> None:
        bystander = Bystander(ws_url, tokens=tokens, pace_ms=pace_ms)
        try:
            async with bystander:
                started.set()
        except BaseException as exc:  # handed to the test's process
            out.put(f"the bystander failed: {type(exc).__name__}: {exc}")
        else:
            out.put((bystander.frames, bystander.arrivals, bystander.expected))
        finally:
            started.set()

    asyncio.run(run())


class Apart(Bystander):
    """A Bystander streaming from a process of its own (stream_apart, multiprocessing's
    spawn), used the same way: what the attacking test costs its own process (building
    and sending half a megabyte of JSON, its GIL, its loop) is then not read as the
    server's stall. Its frames are copied here when the block ends."""

    async def __aenter__(self) -> Apart:
        spawn = multiprocessing.get_context("spawn")
        self._began, self._out = spawn.Event(), spawn.Queue()
        self._proc = spawn.Process(target=stream_apart, name="bystander", args=(
            self.ws_url, self.tokens, self.pace_s * 1000, self._began, self._out))
        self._proc.start()
        if not await asyncio.to_thread(self._began.wait, 60):
            self._proc.kill()
            raise AssertionError("the bystander did not start")
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            result = await asyncio.to_thread(self._out.get, True,
                                             60 + self.tokens * self.pace_s * 4)
        finally:
            await asyncio.to_thread(self._proc.join, 30)
            if self._proc.is_alive():
                self._proc.kill()
        if isinstance(result, str):
            raise AssertionError(result)
        self.frames, self.arrivals, self.expected = result
