"""Issue 15, the HTTP half: each attack against a real fake-engine server on a free port,
loopback only, bounded in count and time, while a bystander stream runs (hostile.py).

Attackers that must count as other clients connect from 127.0.0.2 and up (loopback too).
Each attack prints one FIGURE line (run with -s): what was sent, the bystander's worst
stall, peak RSS over the baseline, RSS after, time to recover (a fresh /health answered).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import LOGS, ServerProcess, broken_model, free_port, running
from tests.e2e.hostile import Apart, rss_mb

FIGURES: list[dict[str, Any]] = []
JSON_HEAD = b"content-type: application/json\r\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """A fake-engine server at the default limits."""
    with running(ServerProcess(("--engine", "fake"))) as s:
        yield s


@pytest.fixture(scope="module", autouse=True)
def figures() -> Iterator[None]:
    yield
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / "hostile_http.json").write_text(json.dumps(FIGURES, indent=1))


class LimitedServer(ServerProcess):
    """A ServerProcess under a low open-file limit (soft and hard), so that a few hundred
    sockets reach it."""

    def __init__(self, args: tuple[str, ...], nofile: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"server-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tokenpipe", "serve", "--port", str(self.port), *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=dict(os.environ),
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))


# ---- measuring -----------------------------------------------------------------------------


async def health_ok(server: ServerProcess, source: str = "127.0.0.1") -> bool:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(transport=transport, timeout=5) as http:
        with contextlib.suppress(httpx.HTTPError):
            return (await http.get(server.url + "/health")).status_code == 200
    return False


async def under_attack(server: ServerProcess, name: str, sent: str,
                       attack: Callable[[], Awaitable[Any]], *, tokens: int = 300) -> Any:
    """Runs `attack` while a bystander streams and RSS is sampled; checks the bystander,
    records the figures and returns what the attack returned."""
    baseline = rss_mb(server)
    peak = baseline
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, rss_mb(server))
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    async with Apart(server.ws_url, tokens=tokens) as bystander:
        result = await attack()
        ended = time.monotonic()
        while not await health_ok(server):
            assert time.monotonic() - ended < 30, "the server did not recover"
        recover_s = time.monotonic() - ended
    sampling = False
    await sampler
    await asyncio.sleep(0.5)
    after = rss_mb(server)
    bystander.check()
    figure = {"attack": name, "sent": sent, "stall_ms": round(bystander.worst_stall_s * 1000, 1),
              "rss_baseline_mb": round(baseline, 1), "rss_peak_over_mb": round(peak - baseline, 1),
              "rss_after_over_mb": round(after - baseline, 1),
              "recover_ms": round(recover_s * 1000, 1)}
    FIGURES.append(figure)
    print("FIGURE", json.dumps(figure))
    # generous: the machine is shared (the slowloris attack's stall read 598 ms once in a
    # full serial run, under 0.5 s alone: an open question)
    assert bystander.worst_stall_s < 1.0, figure
    assert peak - baseline < 50, figure
    return result


# ---- raw HTTP --------------------------------------------------------------------------------


async def connect(server: ServerProcess, source: str = "127.0.0.1",
                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port, local_addr=(source, 0))


async def answer(reader: asyncio.StreamReader) -> tuple[int | None, Any]:
    """The status and JSON body of the one response before the server closes."""
    try:
        data = await asyncio.wait_for(reader.read(), 10)
    except (ConnectionResetError, BrokenPipeError):
        return None, None
    if not data.startswith(b"HTTP/1.1 "):
        return None, data
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body) if body else None


async def exchange(server: ServerProcess, data: bytes, source: str = "127.0.0.1",
                   ) -> tuple[int | None, Any]:
    reader, writer = await connect(server, source)
    writer.write(data)
    try:
        return await answer(reader)
    finally:
        writer.close()


def openai_error(body: Any) -> str:
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    message: str = body["error"]["message"]
    return message


# ---- 1. Origin -------------------------------------------------------------------------------

HOSTILE_ORIGINS = ["http://127.0.0.1.evil.com", "http://127.evil.com", "http://127.0.0.1.nip.io",
                   "http://localhost.evil.com:8000", "http://[::1].evil.com", "http://evil.com"]


async def test_origin_prefix_hijack_is_refused(server: ServerProcess) -> None:
    async def attack() -> None:
        for origin in HOSTILE_ORIGINS:
            with pytest.raises(websockets.InvalidStatus) as info:
                await websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                         origin=origin)  # type: ignore[arg-type]
            assert info.value.response.status_code == 403, origin
        for origin in ("http://127.0.0.1:3000", "http://localhost:5173", "http://[::1]:8000",
                       f"http://127.0.0.1:{server.port}"):
            async with websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                          origin=origin) as ws:  # type: ignore[arg-type]
                assert json.loads(await ws.recv())["type"] == "hello"

    await under_attack(server, "origin prefix", f"{len(HOSTILE_ORIGINS)} hostile origins on /ws",
                       attack)


# ---- 2. Host (DNS rebinding) ---------------------------------------------------------------


# an answered request (not refused) ends now, not at the 5 s keep-alive timeout: exchange()
# reads until the server closes
CLOSE = b"Connection: close\r\n"


def get(path: str, host: str, extra: bytes = b"") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode() + extra + b"\r\n"


UPGRADE = (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           b"Sec-WebSocket-Protocol: tokenpipe.v1\r\n")


async def test_dns_rebinding_hosts_are_refused_on_every_route(server: ServerProcess) -> None:
    port = server.port
    rebound = [f"evil.com:{port}", "evil.com", f"127.0.0.1.evil.com:{port}", "localhost.evil.com"]

    async def attack() -> None:
        for host in rebound:
            status, body = await exchange(server, get("/v1/models", host))
            assert status == 421 and "--allowed-hosts" in openai_error(body)
            status, body = await exchange(server, get("/health", host))
            assert status == 421 and "host" in body["detail"]
            assert (await exchange(server, get("/", host)))[0] == 421
            origin = f"Origin: http://{host}\r\n".encode()
            status, body = await exchange(server, get("/ws", host, UPGRADE + origin))
            assert status == 421 and openai_error(body)
            post = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n".encode() + JSON_HEAD
                    + b'content-length: 44\r\n\r\n{"messages":[{"role":"user","content":"x"}]}')
            assert (await exchange(server, post))[0] == 421
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "127.0.0.2"):
            assert (await exchange(server, get("/v1/models", host, CLOSE)))[0] == 200, host

    await under_attack(server, "dns rebinding", f"{len(rebound) * 5} requests with a foreign Host",
                       attack)


async def test_allowed_hosts_are_answered_and_others_still_refused() -> None:
    with running(ServerProcess(("--engine", "fake", "--allowed-hosts", "chat.example.com"))) as s:
        assert (await exchange(s, get("/v1/models", "chat.example.com:443", CLOSE)))[0] == 200
        assert (await exchange(s, get("/v1/models", "evil.com")))[0] == 421
        reader, writer = await connect(s)  # Origin equal to an allowed Host
        writer.write(get("/ws", "chat.example.com", UPGRADE + b"Origin: http://chat.example.com\r\n"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        writer.close()
        assert head.startswith(b"HTTP/1.1 101 ")


# ---- 3. bodies, heads, bad JSON ---------------------------------------------------------------


async def test_a_20_mb_body_is_refused_at_once(server: ServerProcess) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 20_000_000}]}).encode()

    async def attack() -> httpx.Response:
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(server.url + "/v1/chat/completions", content=body,
                                   headers={"content-type": "application/json"})

    response = await under_attack(server, "20 MB body", "POST /v1/chat/completions, "
                                  "Content-Length 20 MB", attack)
    assert response.status_code == 413
    assert "--max-body-bytes" in openai_error(response.json())
    status, body = await exchange(server, b"POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  b"content-length: 20000000\r\n\r\n")
    assert status == 413 and "--max-body-bytes" in body["detail"]  # FastAPI's shape here


def chunked(megabytes: int, counter: list[int]) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"messages":[{"role":"user","content":"'
        for _ in range(megabytes * 16):
            counter[0] += 65536
            yield b"x" * 65536

    return chunks()


async def test_chunked_bodies_over_the_limit_get_413(server: ServerProcess) -> None:
    async def attack() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as http:
            return [await http.post(server.url + path, content=chunked(4, [0]),
                                    headers={"content-type": "application/json"})
                    for path in ("/v1/chat/completions", "/v1/completions")]

    responses = await under_attack(server, "4 MB chunked", "two chunked bodies of 4 MB "
                                   "(/v1/chat/completions, /v1/completions)", attack)
    assert [r.status_code for r in responses] == [413, 413]
    assert all("--max-body-bytes" in openai_error(r.json()) for r in responses)


async def test_a_100_mb_chunked_body_is_cut_off(server: ServerProcess) -> None:
    sent = [0]

    async def attack() -> int | None:
        async with httpx.AsyncClient(timeout=30) as http:
            try:
                return (await http.post(server.url + "/v1/completions", content=chunked(
                    100, sent), headers={"content-type": "application/json"})).status_code
            except httpx.TransportError:  # cut off after what a lingering close reads
                return None

    status = await under_attack(server, "100 MB chunked", "a chunked body of up to 100 MB",
                                attack)
    assert status in (413, None) and sent[0] < 80 * 1024 * 1024, (status, sent)


async def test_the_limit_is_exact_and_a_body_within_it_is_served(server: ServerProcess) -> None:
    def body(size: int) -> bytes:  # padded in `user`, accepted and ignored: cheap to serve
        head = b'{"prompt":"[[tokens=4]]","max_tokens":4,"user":"'
        return head + b"x" * (size - len(head) - 2) + b'"}'

    async def attack() -> list[int]:
        async with httpx.AsyncClient(timeout=60) as http:
            return [(await http.post(server.url + "/v1/completions", content=body(size),
                                     headers={"content-type": "application/json"})).status_code
                    for size in (1 << 20, (1 << 20) + 1)]

    statuses = await under_attack(server, "1 MiB body (legal)", "POST /v1/completions of "
                                  "1,048,576 then 1,048,577 bytes", attack)
    assert statuses == [200, 413]


async def test_unfinished_huge_headers_are_cut_off(server: ServerProcess) -> None:
    async def hold_header() -> tuple[int | None, int]:
        reader, writer = await connect(server)
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        reading = asyncio.create_task(answer(reader))
        written = 0
        with contextlib.suppress(ConnectionError):
            while written < 100_000_000 and not reading.done():
                writer.write(b"a" * 65536)
                written += 65536
                await writer.drain()
                await asyncio.sleep(0)
        writer.close()
        return (await reading)[0], written

    async def attack() -> list[tuple[int | None, int]]:
        return await asyncio.gather(*(hold_header() for _ in range(5)))

    results = await under_attack(server, "unfinished headers", "5 connections, each an "
                                 "unfinished header of up to 100 MB", attack)
    # `written` is what the client got into loopback's socket buffers before it read the
    # answer (4 MiB once, on a quiet machine): the server reads 32 KB of a head at most
    for status, written in results:
        assert status in (431, None) and written <= 8 * 1024 * 1024, results  # None: reset
    assert any(status == 431 for status, _ in results)


async def test_too_many_or_too_long_header_lines_get_431(server: ServerProcess) -> None:
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(150))
    long_line = b"X-Long: " + b"a" * 40_000 + b"\r\n"

    async def attack() -> list[tuple[int | None, Any]]:
        return [await exchange(server, get("/v1/models", "127.0.0.1", many)),
                await exchange(server, get("/health", "127.0.0.1", long_line)),
                await exchange(server, get("/ws", "127.0.0.1", UPGRADE + long_line))]

    results = await under_attack(server, "header lines", "150 header lines; a 40 KB header "
                                 "(HTTP and /ws upgrade)", attack)
    assert [status for status, _ in results] == [431, 431, 431]
    assert "100 header lines" in openai_error(results[0][1])


NEST = b"[" * 100_000 + b"]" * 100_000
BAD_JSON = {  # what: (a chat body, a completion body)
    "a lone surrogate": (b'{"messages":[{"role":"user","content":"a\\ud800"}]}',
                         b'{"prompt":"a\\ud800"}'),
    "a lone surrogate in a list": (b'{"messages":[{"role":"user","content":[{"type":"text",'
                                   b'"text":"a\\udfffb"}]}]}', b'{"prompt":["\\udfff"]}'),
    "100k-level nesting": (b'{"messages":' + NEST + b"}", b'{"prompt":' + NEST + b"}"),
    "a 5,000-digit number": (b'{"messages":[{"role":"user","content":"x"}],"seed":'
                             + b"9" * 5000 + b"}", b'{"prompt":"x","seed":' + b"9" * 5000 + b"}"),
}


async def test_surrogates_and_deep_nesting_get_400_in_openai_shape(server: ServerProcess) -> None:
    async def attack() -> list[tuple[str, httpx.Response]]:
        out = []
        async with httpx.AsyncClient(timeout=30) as http:
            for name, bodies in BAD_JSON.items():
                for path, body in zip(("/v1/chat/completions", "/v1/completions"), bodies,
                                      strict=True):
                    out.append((f"{name} {path}", await http.post(
                        server.url + path, content=body,
                        headers={"content-type": "application/json"})))
        return out

    results = await under_attack(server, "bad JSON", "surrogates, deep nesting, long numbers "
                                 "on both routes", attack)
    for what, response in results:
        assert response.status_code == 400, (what, response.text)
        message = openai_error(response.json())
        assert "surrogate" in message or "JSON body" in message, (what, message)


# ---- 4. timeouts and connection caps -----------------------------------------------------------


async def test_slow_idle_and_endless_requests_are_closed() -> None:
    args = ("--engine", "fake", "--header-timeout-s", "1", "--body-timeout-s", "2",
            "--keep-alive-timeout-s", "1")
    with running(ServerProcess(args)) as s:
        async def slowloris() -> tuple[int | None, float]:
            reader, writer = await connect(s, "127.0.0.2")
            t0 = time.monotonic()
            writer.write(b"GET /health HTTP/1.1\r\n")
            reading = asyncio.create_task(answer(reader))
            with contextlib.suppress(ConnectionError):
                while not reading.done():
                    writer.write(b"X: y\r\n")  # a header line every 0.3 s, never the end
                    await asyncio.wait([reading], timeout=0.3)
            writer.close()
            return (await reading)[0], time.monotonic() - t0

        async def idle() -> tuple[int | None, float]:
            reader, writer = await connect(s, "127.0.0.3")
            t0 = time.monotonic()
            status, _ = await answer(reader)
            writer.close()
            return status, time.monotonic() - t0

        async def endless_body() -> tuple[int | None, float]:
            reader, writer = await connect(s, "127.0.0.4")
            t0 = time.monotonic()
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + JSON_HEAD
                         + b"transfer-encoding: chunked\r\n\r\n1\r\n{\r\n")
            reading = asyncio.create_task(answer(reader))
            with contextlib.suppress(ConnectionError):
                while not reading.done():
                    writer.write(b"1\r\n \r\n")
                    await asyncio.wait([reading], timeout=0.3)
            writer.close()
            return (await reading)[0], time.monotonic() - t0

        async def kept_alive() -> tuple[int | None, float]:
            reader, writer = await connect(s, "127.0.0.5")
            writer.write(get("/health", "127.0.0.1"))
            await reader.readuntil(b'"states":{"fake":"loaded"}}')
            t0 = time.monotonic()
            rest = await asyncio.wait_for(reader.read(), 10)  # EOF: closed by the server
            writer.close()
            return (200 if rest == b"" else None), time.monotonic() - t0

        async def attack() -> list[tuple[int | None, float]]:
            kinds = [slowloris] * 40 + [idle] * 40 + [endless_body] * 10 + [kept_alive] * 10
            return await asyncio.gather(*(kind() for kind in kinds))

        results = await under_attack(s, "slow and idle", "40 slowloris, 40 idle, 10 endless "
                                     "chunked bodies, 10 idle keep-alives", attack, tokens=500)
        statuses = [status for status, _ in results]
        assert statuses == [408] * 90 + [200] * 10, statuses
        slowest = [max(t for _, t in results[a:b]) for a, b in ((0, 80), (80, 90), (90, 100))]
        assert slowest[0] < 1 + 3 and slowest[1] < 2 + 3 and slowest[2] < 1 + 3, slowest


async def hold(server: ServerProcess, n: int, source: str,
               ) -> tuple[list[asyncio.StreamWriter], int]:
    """Opens n idle connections from `source`: (those held open, how many got 503)."""
    opened = await asyncio.gather(*(connect(server, source) for _ in range(n)))

    async def refused(reader: asyncio.StreamReader) -> bool:
        try:
            status, body = await asyncio.wait_for(answer(reader), 1.0)
        except TimeoutError:  # held open, waiting for a request head
            return False
        assert status == 503 and openai_error(body), (status, body)
        return True

    answers = await asyncio.gather(*(refused(reader) for reader, _ in opened))
    held = [writer for (_, writer), no in zip(opened, answers, strict=True) if not no]
    for (_, writer), no in zip(opened, answers, strict=True):
        if no:
            writer.close()
    return held, sum(answers)


async def test_one_address_cannot_hold_more_than_its_connections(server: ServerProcess) -> None:
    async def attack() -> tuple[int, int, bool]:
        held, answers = await requests_held(server, 600, "127.0.0.2", wave=100)
        others_fine = await health_ok(server) and await health_ok(server, "127.0.0.3")
        for writer in held:
            writer.close()
        return len(held), answers.count(503), others_fine

    held, refused, others_fine = await under_attack(
        server, "per-address cap", "600 connections from 127.0.0.2, 100 at a time, held "
        "open (cap 512)", attack)
    assert (held, refused) == (512, 88) and others_fine


async def test_a_burst_of_idle_sockets_is_answered_503_past_the_cap(
        server: ServerProcess) -> None:
    async def attack() -> tuple[int, int]:
        first, _ = await requests_held(server, 100, "127.0.0.4", wave=100)
        held, refused = await hold(server, 500, "127.0.0.4")  # within the backlog of 512
        for writer in first + held:
            writer.close()
        return len(held), refused

    held, refused = await under_attack(server, "idle burst", "100 connections, then 500 idle "
                                       "sockets at once, from 127.0.0.4 (cap 512)", attack)
    assert (held, refused) == (412, 88)


async def test_websockets_count_in_the_per_address_cap() -> None:
    args = ("--engine", "fake", "--max-tcp-connections-per-client", "3")
    with running(ServerProcess(args)) as s:
        url = s.ws_url
        sockets = [await websockets.connect(url, local_addr=("127.0.0.2", 0)) for _ in range(3)]
        with pytest.raises(websockets.InvalidStatus) as info:
            await websockets.connect(url, local_addr=("127.0.0.2", 0))
        assert info.value.response.status_code == 503
        assert not await health_ok(s, "127.0.0.2")
        await sockets.pop().close()
        await asyncio.sleep(0.2)  # the closed WebSocket gave its slot back
        assert await health_ok(s, "127.0.0.2")
        for ws in sockets:
            await ws.close()


async def requests_held(server: ServerProcess, n: int, source: str, *, wave: int,
                        wait_s: float = 30) -> tuple[list[asyncio.StreamWriter], list[Any]]:
    """n connections from `source`, `wave` at a time, each sending GET /health: (those
    answered 200 and kept alive, every answer: 200, 503, or None if none within wait_s).
    A wave larger than the listen backlog waits in the kernel: handshakes that overflow
    its accept queue are dropped, and those clients wait for TCP's retries."""
    async def status(reader: asyncio.StreamReader) -> int | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait_s)
        except TimeoutError:
            return None
        return int(head.split(b" ", 2)[1])

    held: list[asyncio.StreamWriter] = []
    statuses: list[Any] = []
    for start in range(0, n, wave):
        opened = await asyncio.gather(*(connect(server, source)
                                        for _ in range(min(wave, n - start))))
        for _, writer in opened:
            writer.write(get("/health", "127.0.0.1"))
        answers = await asyncio.gather(*(status(reader) for reader, _ in opened))
        statuses += answers
        for (_, writer), code in zip(opened, answers, strict=True):
            (held.append(writer) if code == 200 else writer.close())
    assert set(statuses) <= {200, 503, None}, statuses
    return held, statuses


def server_fds(server: ServerProcess) -> int:
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


async def test_descriptors_never_run_out_and_the_cap_answers_503() -> None:
    """~20,000 idle sockets used up every descriptor; under `ulimit -n 256` a few hundred
    do. The caps (192 in all, 96 per address here) refuse first, with 503, and the listen
    backlog (about 12 here) keeps bursts of accepted sockets within the reserve."""
    args = ("--engine", "fake", "--keep-alive-timeout-s", "120")  # admitted ones stay open
    with running(LimitedServer(args, nofile=256)) as s:
        found_caps = re.search(r"at most 192 open \(96 per client address; open-file limit "
                               r"256, backlog (\d+)\)", s.log())
        assert found_caps, s.log()
        backlog = int(found_caps.group(1))
        peak_fds = server_fds(s)

        async def watch_fds() -> None:
            nonlocal peak_fds
            while True:
                peak_fds = max(peak_fds, server_fds(s))
                await asyncio.sleep(0.01)

        async def attack() -> dict[str, Any]:
            watching = asyncio.create_task(watch_fds())
            one, answers = await requests_held(s, 400, "127.0.0.2", wave=backlog)
            found: dict[str, Any] = {"one address": {
                "held": len(one), "refused": answers.count(503), "health": await health_ok(s)}}
            many = [await requests_held(s, 100, f"127.0.0.{i}", wave=backlog) for i in range(3, 7)]
            found["four more"] = {"held": sum(len(h) for h, _ in many),
                                  "refused": sum(a.count(503) for _, a in many),
                                  "health": await health_ok(s)}
            for writer in one + [w for h, _ in many for w in h]:
                writer.close()
            await asyncio.sleep(0.5)
            burst, answers = await requests_held(s, 400, "127.0.0.7", wave=400, wait_s=5)
            found["burst of 400"] = {"held": len(burst), "refused": answers.count(503),
                                     "waiting in the kernel": answers.count(None),
                                     "health": await health_ok(s)}
            for writer in burst:
                writer.close()
            watching.cancel()
            found["peak fds"] = peak_fds
            return found

        found = await under_attack(s, "fd exhaustion", "ulimit -n 256: 400 connections from "
                                   "one address, 100 from each of 4 more, a burst of 400",
                                   attack, tokens=1500)
        print("FIGURE fd exhaustion:", json.dumps(found))
        assert found["one address"] == {"held": 96, "refused": 304, "health": True}, found
        # then the total cap, 503 for everyone (the bystander's WebSocket holds one slot)
        assert found["four more"] == {"held": 192 - 96 - 1, "refused": 305, "health": False}
        assert found["burst of 400"]["held"] == 96 and found["burst of 400"]["health"], found
        assert found["peak fds"] < 256, found
        log = s.log()
        assert "Too many open files" not in log, log[-2000:]
        assert log.count("refused a connection") <= 3  # one line per 10 s, not per refusal


# ---- 5. HEAD -----------------------------------------------------------------------------------


async def test_head_on_health_and_metrics(server: ServerProcess) -> None:
    async with httpx.AsyncClient() as http:
        for path in ("/health", "/metrics"):
            response = await http.head(server.url + path)
            assert response.status_code == 200 and response.content == b"", path
    broken = ServerProcess(("--model", broken_model()))
    try:
        deadline = time.monotonic() + 60
        status = None
        async with httpx.AsyncClient() as http:
            while status is None and time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    response = await http.head(broken.url + "/health")
                    status = response.status_code
                await asyncio.sleep(0.2)
        assert status == 503 and response.content == b""
    finally:
        broken.stop()
