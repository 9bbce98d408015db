"""tokenpipe bench: N concurrent streams against a server; prints latency and throughput.

    tokenpipe bench --url ws://127.0.0.1:8000/ws -n 8 --max-tokens 128
    tokenpipe bench --api sse --url http://127.0.0.1:8000 -n 1
    tokenpipe bench --reference llama-cpp-python   # plus the same prompt in-process, A B A B
    tokenpipe bench --compare http://127.0.0.1:8080 # another OpenAI-style server, A B A B
    tokenpipe bench --decode-steps -n 8             # llama.cpp alone: what batching can gain

Tokens are counted from the server's usage; time to first token is measured by the client
from sending the request to receiving the first non-empty text.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PROMPT = "Write a short story about a robot who learns to paint."


@dataclass
class StreamResult:
    ttft: float = 0.0
    total: float = 0.0
    tokens: int = 0
    deltas: int = 0
    gaps: list[float] = field(default_factory=list)
    error: str | None = None
    started: float = 0.0
    last: float = 0.0

    def start(self) -> None:
        self.started = self.last = time.perf_counter()

    def arrived(self) -> None:
        """One piece of text: the first sets time to first token, the rest the gaps."""
        now = time.perf_counter()
        if self.ttft == 0.0:
            self.ttft = now - self.started
        else:
            self.gaps.append(now - self.last)
        self.last = now
        self.deltas += 1

    def stop(self) -> None:
        self.total = time.perf_counter() - self.started


@dataclass
class RunResult:
    label: str
    streams: list[StreamResult]
    wall: float
    server_cpu: float | None = None  # seconds of the server's CPU, where /metrics tells

    def summary(self) -> dict[str, Any]:
        ok = [s for s in self.streams if s.error is None]
        ttfts = sorted(s.ttft for s in ok)
        gaps = sorted(g for s in ok for g in s.gaps)
        tokens = sum(s.tokens for s in ok)
        deltas = sum(s.deltas for s in ok)
        per_stream = [s.tokens / s.total for s in ok if s.total > 0]
        return {
            "label": self.label,
            "streams": len(self.streams),
            "errors": len(self.streams) - len(ok),
            "ttft_p50_ms": _pct(ttfts, 50) * 1000,
            "ttft_p99_ms": _pct(ttfts, 99) * 1000,
            "ttft_max_ms": (ttfts[-1] if ttfts else 0) * 1000,
            "itl_p50_ms": _pct(gaps, 50) * 1000,
            "itl_p99_ms": _pct(gaps, 99) * 1000,
            "aggregate_tok_s": tokens / self.wall if self.wall else 0.0,
            "per_stream_tok_s": statistics.mean(per_stream) if per_stream else 0.0,
            "tokens": tokens,
            "deltas_per_s": deltas / self.wall if self.wall else 0.0,
            "deltas": deltas,
            "server_cpu_s": self.server_cpu,
            "server_us_per_delta": (self.server_cpu / deltas * 1e6
                                    if self.server_cpu is not None and deltas else None),
        }


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="measure time to first token and tokens/s",
                       description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default="ws://127.0.0.1:8000/ws",
                   help="ws://HOST:PORT/ws for --api ws, http://HOST:PORT for --api sse")
    p.add_argument("--api", choices=["ws", "sse"], default="ws")
    p.add_argument("-n", "--concurrency", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--rounds", type=int, default=3, help="rounds (A B A B with --compare)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--api-key")
    p.add_argument("--model", help="model name to send (needed by some --compare servers)")
    p.add_argument("--compare", help="another OpenAI-style server's base URL, run side by side")
    p.add_argument("--reference", choices=["llama-cpp-python"],
                   help="also run the same prompt in this process with llama-cpp-python's\n"
                        "create_chat_completion(stream=True), one stream, side by side")
    p.add_argument("--model-path", help="GGUF for --reference (default: the bundled model)")
    p.add_argument("--threads", type=int)
    p.add_argument("--json", action="store_true", help="print one JSON object per run")
    p.add_argument("--procs", type=int, default=1,
                   help="spread the clients over this many processes (for gateway loads)")
    p.add_argument("--decode-steps", action="store_true",
                   help="no server: time llama.cpp's batched decode alone in this process\n"
                        "for 1, 2, 4 ... -n sequences (--model-path, --threads); the\n"
                        "most -n streams can gain over one on this machine and model")
    p.add_argument("--idle", type=int, metavar="N",
                   help="open N idle connections and report the server's memory per 1,000")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.decode_steps:
        return _decode_steps(args)
    return asyncio.run(_main(args))


async def _main(args: argparse.Namespace) -> int:
    if args.idle:
        return await _idle(args)
    messages = [{"role": "user", "content": args.prompt}]
    results: dict[str, list[RunResult]] = {}

    async def one(label: str, fn: Any) -> None:
        result = await fn()
        results.setdefault(label, []).append(result)
        _print(result, args.json)

    label = f"tokenpipe-{args.api}"
    targets: list[tuple[str, Any]] = [
        (label, lambda: _server_run(label, args.api, args.url, args, messages))]
    if args.reference:  # in this process, while the server idles: A B A B
        targets.append(("llama-cpp-python", lambda: asyncio.to_thread(
            _reference_run, args, messages)))
    if args.compare:
        targets.append(("compare", lambda: _server_run(
            "compare", "sse", args.compare, args, messages)))
    for _label, fn in targets:
        for _ in range(args.warmup):
            await fn()
    for _ in range(args.rounds):
        for label, fn in targets:
            await one(label, fn)
    print("\nmedians over rounds:")
    base = None
    for label, runs in results.items():
        agg = statistics.median(r.summary()["aggregate_tok_s"] for r in runs)
        ttft = statistics.median(r.summary()["ttft_p50_ms"] for r in runs)
        base = base or agg
        print(f"  {label:20s} aggregate {agg:8.1f} tok/s  ttft p50 {ttft:8.1f} ms"
              f"  ratio {agg / base:5.2f}x")
    return 0


def _print(result: RunResult, as_json: bool) -> None:
    s = result.summary()
    if as_json:
        print(json.dumps(s))
        return
    print(f"{s['label']:20s} n={s['streams']} err={s['errors']} "
          f"ttft p50 {s['ttft_p50_ms']:7.1f} p99 {s['ttft_p99_ms']:7.1f} ms | "
          f"itl p50 {s['itl_p50_ms']:6.2f} p99 {s['itl_p99_ms']:6.2f} ms | "
          f"aggregate {s['aggregate_tok_s']:7.1f} tok/s, per stream "
          f"{s['per_stream_tok_s']:6.1f} tok/s ({s['tokens']} tokens, "
          f"{s['deltas_per_s']:.0f} deltas/s)")
    if s["server_us_per_delta"] is not None:
        print(f"{'':20s} server CPU {s['server_cpu_s']:.2f} s: "
              f"{s['server_us_per_delta']:.1f} us per delta, "
              f"{s['server_cpu_s'] / s['tokens'] * 1e6 if s['tokens'] else 0:.1f} us per token")


async def _server_run(label: str, api: str, url: str, args: argparse.Namespace,
                      messages: list[dict[str, str]]) -> RunResult:
    cpu0 = await _server_cpu(url)
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
    cpu1 = await _server_cpu(url)
    cpu = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    return RunResult(label, list(streams), wall, cpu)


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


def _base_url(url: str) -> str:
    base = url.replace("ws://", "http://").replace("wss://", "https://")
    return base.rstrip("/").removesuffix("/ws")


async def _server_cpu(url: str) -> float | None:
    """The server's process_cpu_seconds_total from /metrics (tokenpipe's), else None."""
    import re

    from . import http as http1

    origin = http1.Origin(_base_url(url), spares=False)
    try:
        async with asyncio.timeout(5):
            conn = await origin.request("GET", "/metrics")
            text = (await conn.read()).decode("utf-8", "replace")
            conn.release()
    except (http1.HTTPError, TimeoutError):
        return None
    finally:
        origin.close()
    found = re.search(r"^process_cpu_seconds_total ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else None


async def _streams(api: str, url: str, args: argparse.Namespace,
                   messages: list[dict[str, str]], n: int) -> list[StreamResult]:
    fn = _ws_stream if api == "ws" else _sse_stream
    line = StartLine(n)
    return list(await asyncio.gather(*(fn(url, args, messages, line) for _ in range(n))))


def _streams_in_process(api: str, url: str, args: argparse.Namespace,
                        messages: list[dict[str, str]], n: int) -> list[StreamResult]:
    return asyncio.run(_streams(api, url, args, messages, n))


async def _idle(args: argparse.Namespace) -> int:
    """Opens N connections that only say hello, and reads the server's RSS from /metrics."""
    import re

    import httpx
    import websockets

    base = _base_url(args.url)

    def rss() -> float:
        text = httpx.get(base + "/metrics", timeout=10).text
        found = re.search(r"^process_resident_memory_bytes ([0-9.e+]+)$", text, re.M)
        return float(found.group(1)) if found else float("nan")

    before = rss()
    sockets = []
    for _ in range(args.idle):
        ws = await websockets.connect(args.url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
        await ws.recv()
        sockets.append(ws)
    await asyncio.sleep(1.0)
    after = rss()
    await asyncio.gather(*(ws.close() for ws in sockets))
    grown = (after - before) / 1e6
    print(f"{args.idle} idle connections: server RSS {before / 1e6:.1f} MB -> "
          f"{after / 1e6:.1f} MB (+{grown:.1f} MB, {grown * 1000 / args.idle:.1f} MB per 1,000)")
    return 0


class _WsLoad(asyncio.Protocol):
    """One tokenpipe.v1 stream on websockets' sans-I/O protocol, with no task or queue per
    frame: a load generator must cost far less per delta than the server it measures."""

    def __init__(self, url: str, api_key: str | None, request: dict[str, Any],
                 result: StreamResult, line: StartLine) -> None:
        from websockets.client import ClientProtocol
        from websockets.uri import parse_uri

        subprotocols = ["tokenpipe.v1"]
        if api_key:
            token = base64.urlsafe_b64encode(api_key.encode()).decode().rstrip("=")
            subprotocols.append(f"tokenpipe.bearer.{token}")
        self.ws = ClientProtocol(parse_uri(url), subprotocols=subprotocols)  # type: ignore[arg-type]
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
        from websockets.frames import Frame, Opcode
        from websockets.http11 import Response

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


async def _ws_stream(url: str, args: argparse.Namespace,
                     messages: list[dict[str, str]], line: StartLine) -> StreamResult:
    """Opens the connection, then the clock starts when the server says hello."""
    from urllib.parse import urlsplit

    result = StreamResult()
    request = {"type": "generate", "id": "bench", "messages": messages,
               "params": {"max_tokens": args.max_tokens, "temperature": 0.0}}
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


async def _sse_stream(url: str, args: argparse.Namespace,
                      messages: list[dict[str, str]], start_line: StartLine) -> StreamResult:
    """One streamed chat completion over tokenpipe's own small HTTP/1.1 client (the openai
    engine's): the request in one write, the events parsed as they arrive. An httpx client
    per stream cost the bench about 40 ms of CPU each (most of it building a TLS context)
    and wrote head and body apart; on a machine where the bench shares cores with the
    servers it measures, that CPU is theirs."""
    from . import http as http1
    from .http import SSEDecoder

    result = StreamResult()
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    body: dict[str, Any] = {"messages": messages, "max_tokens": args.max_tokens,
                            "temperature": 0.0, "stream": True,
                            "stream_options": {"include_usage": True}}
    if args.model:
        body["model"] = args.model
    request = json.dumps(body).encode()
    origin = http1.Origin(url.rstrip("/"), spares=False)
    arrived = False
    try:
        # Connect first, as the WebSocket client does before its clock starts.
        conn = await origin.request("GET", "/v1/models", b"", headers, connect_timeout_s=30)
        await conn.read()
        conn.release()
        arrived = True
        await start_line.wait()
        result.start()
        conn = await origin.request("POST", "/v1/chat/completions", request,
                                    {"content-type": "application/json", **headers},
                                    connect_timeout_s=30)
        if conn.status != 200:
            result.error = f"http {conn.status}"
            conn.close()
            return result
        decoder = SSEDecoder()
        while (raw := await conn.receive()) is not None:
            for event in decoder.feed(raw):
                if not event.data.startswith("{"):  # [DONE]
                    continue
                chunk = json.loads(event.data)
                if chunk.get("usage"):
                    result.tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        result.arrived()
        conn.release()
        result.stop()
    except http1.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if not arrived:
            start_line.leave()
        origin.close()
    return result


def _decode_steps(args: argparse.Namespace) -> int:
    from .engines.base import EngineOptions
    from .engines.llamacpp import LlamaCppEngine, default_model_path
    from .errors import TokenpipeError

    top = max(1, args.concurrency)
    sizes = sorted({1, top, *(k for k in (2, 4, 8, 16, 32, 64) if k < top)})
    path = args.model_path or str(default_model_path())
    options = EngineOptions(model=path, threads=args.threads, parallel=top,
                            context_size=max(8192, top * 512))
    try:
        times = LlamaCppEngine.time_decode_steps(options, sizes, rounds=max(1, args.rounds))
    except TokenpipeError as exc:
        print(f"tokenpipe bench: {exc.message}", file=sys.stderr)
        return 2
    base = statistics.median(times[1])
    print(f"llama_decode alone, {path}, {args.threads or 'all'} threads, one token for each"
          f" of k sequences a step (median of {len(times[1])} steps):")
    for k in sizes:
        t = statistics.median(times[k])
        print(f"  k={k:<3d} {t * 1000:7.1f} ms a step  {k / t:7.1f} tok/s"
              f"  {k * base / t:5.2f}x one sequence's rate")
    return 0


_REFERENCE: Any = None


def _reference_run(args: argparse.Namespace, messages: list[dict[str, str]]) -> RunResult:
    """llama-cpp-python's own create_chat_completion(stream=True), in this process."""
    global _REFERENCE
    import os

    from llama_cpp import Llama

    from .engines.llamacpp import default_model_path

    if _REFERENCE is None:
        path = args.model_path or str(default_model_path())
        threads = args.threads or os.cpu_count() or 1
        _REFERENCE = Llama(model_path=path, n_ctx=2048, n_threads=threads,
                           n_threads_batch=threads, verbose=False)
    result = StreamResult()
    result.start()
    for chunk in _REFERENCE.create_chat_completion(
        messages=messages, max_tokens=args.max_tokens, temperature=0.0, stream=True,
    ):
        if chunk["choices"][0]["delta"].get("content"):
            result.arrived()
            result.tokens += 1
    result.stop()
    return RunResult("llama-cpp-python", [result], result.total)
