"""Replicas sharing state when the network or Redis fails them (issue 29, item 7): a
replica cut off from Redis while serving (a TCP proxy between it and Redis that the test
cuts: nothing passes either way, connections stay open, new ones wait, as on a network
that drops packets; healed, what waited goes through), and Redis stopped with SIGSTOP
(alive, silent). Streams in flight go on to their end, `/health` says `degraded` and
recovers by itself, nothing crashes: the clients count it. And the two ways a follower
finds that a stream's producer stopped: its address refuses connections (taken over at
once), or nothing answers there (taken over when its lease lapses)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ServerProcess, begun, drop_and_resume, free_port, running
from tests.e2e.redis_server import RedisServer
from tokenpipe.client import Client

pytestmark = pytest.mark.e2e
PACED = [{"role": "user", "content": "[[pace_ms=20]]"}]
TOKENS = 110  # 2.2 s at 20 ms a token: the cut (at least 1.5 s to be noticed) falls in it


class Cut:
    """A TCP proxy to `port` on its own event loop (a thread): `cut()` stops everything
    passing, `heal()` lets it through again."""

    def __init__(self, port: int) -> None:
        self.target, self.port = port, free_port()
        self.loop = asyncio.new_event_loop()
        self.passing = asyncio.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self.loop).result(10)

    async def _listen(self) -> None:
        self.passing.set()
        self.server = await asyncio.start_server(self._bridge, "127.0.0.1", self.port)

    async def _bridge(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        await self.passing.wait()  # a connection made while cut waits for the heal
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                    ) -> None:
        try:
            while data := await reader.read(65536):
                await self.passing.wait()  # cut: held, and nothing more is read
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def cut(self) -> None:
        self.loop.call_soon_threadsafe(self.passing.clear)

    def heal(self) -> None:
        self.loop.call_soon_threadsafe(self.passing.set)

    def wait_ready(self, timeout: float = 10.0) -> None:
        pass

    def stop(self) -> None:
        self.heal()
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def replica(url: str, *extra: str) -> ServerProcess:
    return ServerProcess(("--engine", "fake", "--state", url, "--resume-grace-s", "5",
                          *extra))


async def health(server: ServerProcess) -> dict[str, object]:
    async with httpx.AsyncClient(timeout=10) as http:
        body: dict[str, object] = (await http.get(server.url + "/health")).json()
        return body


async def until_healthy(server: ServerProcess, timeout_s: float = 15.0) -> None:
    """The replica says `ok` again by itself (it probes Redis every second)."""
    deadline = time.monotonic() + timeout_s
    while (body := await health(server))["status"] != "ok":
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.2)


async def until_degraded(server: ServerProcess, timeout_s: float = 10.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while (body := await health(server))["status"] != "degraded":
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.2)
    return body


async def in_flight(server: ServerProcess, count: int) -> list[asyncio.Task[str]]:
    """`count` resumable paced streams on `server`, each read to its end by its own client
    once it has begun (their deltas are out before this returns)."""
    async def one(started: asyncio.Event) -> str:
        async with Client(server.ws_url) as client:
            gen, _, _ = await begun(client, PACED, 2, max_tokens=TOKENS)
            started.set()
            await gen.collect()
            assert gen.end is not None, gen.error
            return gen.text

    events = [asyncio.Event() for _ in range(count)]
    tasks = [asyncio.create_task(one(e)) for e in events]
    await asyncio.gather(*(e.wait() for e in events))
    return tasks


async def whole(server: ServerProcess) -> str:
    async with Client(server.ws_url) as client:
        return await (await client.generate(PACED, params={"max_tokens": TOKENS})).collect()


def counted(results: list[str | BaseException], want: str) -> tuple[int, list[object]]:
    """How many streams ended with the uninterrupted answer, and what the others were."""
    equal = sum(1 for r in results if r == want)
    return equal, [r if isinstance(r, BaseException) else len(r) for r in results
                   if r != want]


def crashed(server: ServerProcess) -> bool:
    return server.proc.poll() is not None or "Traceback" in server.log_path.read_text(
        errors="replace")


async def test_a_replica_cut_off_from_redis_serves_on_and_recovers() -> None:
    """Replica A reaches Redis through a proxy the test cuts; B reaches it directly. Cut
    while A and B serve: every stream in flight on both ends with the uninterrupted
    answer, A's /health says degraded (why: the state store), B's stays ok, a new stream
    on A resumes on A; healed, A is ok again by itself and its new streams resume on B."""
    with running(RedisServer()) as redis_server, running(Cut(redis_server.port)) as cut, \
            running(replica(f"redis://127.0.0.1:{cut.port}/0")) as a, \
            running(replica(redis_server.url)) as b:
        want = await whole(b)
        streams = await in_flight(a, 4) + await in_flight(b, 2)
        cut.cut()
        cut_at = time.monotonic()
        results = await asyncio.gather(*streams, return_exceptions=True)
        equal, others = counted(results, want)
        print(f"cut off from Redis mid-stream: {equal}/{len(results)} streams in flight "
              f"equal to the uninterrupted answer; ended {time.monotonic() - cut_at:.1f} s "
              f"after the cut")
        assert equal == len(results), others
        body = await until_degraded(a)
        assert "state store unreachable" in str(body["state"]), body
        assert (await health(b))["status"] == "ok"
        _, resumed, _ = await drop_and_resume(a.ws_url, 30)  # on its own replica only
        assert resumed.end is not None, resumed.error
        cut.heal()
        await until_healthy(a)
        _, resumed, _ = await drop_and_resume(a.ws_url, 30, resume_url=b.ws_url)
        assert resumed.end is not None and resumed.end["finish_reason"] == "length"
        assert not crashed(a) and not crashed(b)


async def test_redis_stopped_while_serving_costs_only_the_sharing() -> None:
    """Redis gets SIGSTOP (its connections stay open and nothing answers) while two
    replicas serve: every stream in flight ends with the uninterrupted answer, both
    replicas say degraded; SIGCONT: both are ok again by themselves, and a stream resumes
    across them once more."""
    with running(RedisServer()) as redis_server, \
            running(replica(redis_server.url)) as a, running(replica(redis_server.url)) as b:
        want = await whole(a)
        streams = await in_flight(a, 3) + await in_flight(b, 3)
        redis_server.proc.send_signal(signal.SIGSTOP)
        try:
            results = await asyncio.gather(*streams, return_exceptions=True)
            equal, others = counted(results, want)
            print(f"Redis stopped mid-stream: {equal}/{len(results)} streams in flight equal "
                  f"to the uninterrupted answer")
            assert equal == len(results), others
            for server in (a, b):
                body = await until_degraded(server)
                assert "state store unreachable" in str(body["state"]), body
        finally:
            redis_server.proc.send_signal(signal.SIGCONT)
        await until_healthy(a)
        await until_healthy(b)
        _, resumed, _ = await drop_and_resume(a.ws_url, 30, resume_url=b.ws_url)
        assert resumed.end is not None and resumed.end["finish_reason"] == "length"
        assert not crashed(a) and not crashed(b)


@contextlib.contextmanager
def silent_address() -> Iterator[str]:
    """HOST:PORT where connections are neither refused nor answered: a listening socket
    nobody accepts on (the kernel completes the handshake; nothing more comes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("refused", [True, False], ids=["refused", "silent"])
async def test_a_killed_producer_is_taken_over_at_once_where_its_address_refuses(
        refused: bool) -> None:
    """SIGKILL of a stream's producer while a client follows the stream on B: where the
    producer's address refuses connections, B takes it over at once (the gap well under
    its 3 s lease); where something else listens there (`--state-address` of a socket
    that never answers), B waits for the lease to lapse. Both answers end as the
    uninterrupted one."""
    with running(RedisServer()) as redis_server, running(replica(redis_server.url)) as b, \
            silent_address() as silent:
        extra = () if refused else ("--state-address", silent)
        want = await whole(b)
        with running(replica(redis_server.url, *extra)) as doomed:
            async with Client(doomed.ws_url) as first:
                gen, token, seen = await begun(first, PACED, 2, max_tokens=TOKENS)
            async with Client(b.ws_url) as second:
                resumed = await second.resume(token, seen, "again")
                async for _ in resumed:
                    if len(resumed.deltas) >= 3:
                        break
                doomed.stop(signal.SIGKILL)
                last, gap = time.monotonic(), 0.0
                async for _ in resumed:  # the longest wait for a delta after the kill
                    gap, last = max(gap, time.monotonic() - last), time.monotonic()
        text = "".join(d["text"] for d in gen.deltas + resumed.deltas)
        log = b.log_path.read_text(errors="replace")
    print(f"producer killed, its address {'refusing' if refused else 'silent'}: the "
          f"follower's longest wait for a delta after the kill {gap:.2f} s")
    assert resumed.end is not None and text == want
    assert "taken over from a stopped replica" in log
    assert ("refuses connections; taken over without waiting" in log) == refused
