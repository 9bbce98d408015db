"""Replicas sharing their resumable streams in a real Redis (`--state redis://...`):
separate `tokenpipe serve` processes on loopback and Debian's redis-server on a free port.
A stream started on one replica resumes on another, over tokenpipe.v1 and over resumable
SSE, from the client's last seq: nothing lost, nothing repeated, the same chunk id; a
cancel sent to the other replica stops the producer; a forged token is each door's
not-found; the stream of a replica killed with SIGKILL is taken over by the replica its
client follows it on, and ends as the uninterrupted answer; Redis unreachable at start
refuses to start, lost while serving costs only the sharing, slow to answer a batch
costs the stream nothing; every key expires."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ServerProcess, begun, drop_and_resume, free_port, running
from tests.e2e.nginx import Nginx
from tests.e2e.redis_server import RedisServer
from tokenpipe.client import Client, ServerError

pytestmark = pytest.mark.e2e
GRACE_S = 3.0
PACED = [{"role": "user", "content": "[[pace_ms=20]]"}]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running(RedisServer()) as server:
        yield server


def replica(redis_server: RedisServer, *extra: str) -> ServerProcess:
    return ServerProcess(("--engine", "fake", "--state", redis_server.url,
                          "--resume-grace-s", str(GRACE_S), *extra))


@pytest.fixture(scope="module")
def replicas(redis_server: RedisServer) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with running(replica(redis_server)) as a, running(replica(redis_server)) as b:
        yield a, b


async def uninterrupted(server: ServerProcess, max_tokens: int,
                        messages: list[dict[str, str]] = PACED) -> str:
    async with Client(server.ws_url) as client:
        gen = await client.generate(messages, params={"max_tokens": max_tokens})
        return await gen.collect()


async def test_a_v1_stream_resumes_on_another_replica(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = replicas
    first, resumed, text = await drop_and_resume(a.ws_url, 60, resume_url=b.ws_url)
    seqs = [d["seq"] for d in first.deltas] + [d["seq"] for d in resumed.deltas]
    assert seqs == list(range(len(seqs)))  # nothing lost, nothing repeated
    assert resumed.end is not None and resumed.end["finish_reason"] == "length"
    assert text == await uninterrupted(a, 60)


async def sse_events(response: httpx.Response, until: int | None = None
                     ) -> list[tuple[int | None, str]]:
    """(id, data) of each SSE event, up to the one with id `until` (None: to the end)."""
    out: list[tuple[int | None, str]] = []
    event_id: int | None = None
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            event_id = int(line[4:])
        elif line.startswith("data: "):
            out.append((event_id, line[6:]))
            if line == "data: [DONE]" or (until is not None and event_id == until):
                break
            event_id = None
    return out


def content(events: list[tuple[int | None, str]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or ""
                   for _, data in events if data != "[DONE]"
                   for c in [json.loads(data)] if c["choices"])


async def test_resumable_sse_resumes_on_another_replica(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = replicas
    body = {"model": "fake", "messages": PACED, "max_tokens": 60, "stream": True,
            "resumable": True}
    async with httpx.AsyncClient(timeout=30) as http:
        async with http.stream("POST", a.url + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            token = r.headers["x-stream-token"]
            before = await sse_events(r, until=4)
        async with http.stream("GET", f"{b.url}/v1/streams/{token}",
                               headers={"Last-Event-ID": "4"}) as r:
            assert r.status_code == 200, await r.aread()
            after = await sse_events(r)
    ids = [i for i, _ in before + after if i is not None]
    assert ids == list(range(len(ids)))  # contiguous across the two replicas
    chunk_ids = {json.loads(d)["id"] for _, d in before + after if d != "[DONE]"}
    assert len(chunk_ids) == 1  # one chat.completion.chunk id, whichever replica sent it
    assert after[-1][1] == "[DONE]"
    assert content(before) + content(after) == await uninterrupted(a, 60)


async def test_a_client_never_holds_a_delta_the_log_has_not() -> None:
    """Deltas reach the client only once the shared log has them (a replica that dies right
    after sending one loses nothing a resume elsewhere needs): while Redis is stopped
    (SIGSTOP) the stream waits; past the call timeout (1.5 s) the stream goes on without
    the log, /health says degraded, and after SIGCONT the replica uses Redis again."""
    with running(RedisServer()) as redis_server, running(replica(redis_server)) as server:
        reference = await uninterrupted(server, 150)

        async def stalled(seconds: float) -> tuple[int, float, str]:
            """Deltas received while Redis is stopped for `seconds`, the longest wait for
            one, and the whole text."""
            async with Client(server.ws_url) as client:
                gen = await client.generate(PACED, resumable=True, params={"max_tokens": 150})
                async for _ in gen:
                    if len(gen.deltas) >= 3:
                        break
                redis_server.proc.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
                resume = asyncio.get_running_loop().call_later(
                    seconds, redis_server.proc.send_signal, signal.SIGCONT)
                longest, last, during = 0.0, stopped, 0
                try:
                    async for _ in gen:
                        now = time.monotonic()
                        longest, last = max(longest, now - last), now
                        during += now - stopped < seconds
                finally:
                    resume.cancel()
                    redis_server.proc.send_signal(signal.SIGCONT)
                seqs = [d["seq"] for d in gen.deltas]
                assert seqs == list(range(len(seqs)))
                return during, longest, gen.text

        during, longest, text = await stalled(0.8)
        assert during <= 1 and text == reference, (during, longest)
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(server.url + "/health")).json()["status"] == "ok"
            during, longest, text = await stalled(3.0)
            assert text == reference and 0 < during and longest < 2.5, (during, longest)
            deadline = time.monotonic() + 10
            while (await http.get(server.url + "/health")).json()["status"] != "ok":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
        print(f"Redis stopped 3 s: the stream waited {longest:.2f} s, then went on unlogged")


async def test_a_cancel_sent_to_the_other_replica_stops_the_producer(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = replicas
    async with Client(a.ws_url) as first:
        _, token, seen = await begun(first, PACED, 2, max_tokens=2000)
    async with Client(b.ws_url) as second:
        resumed = await second.resume(token, seen, "again")
        async for _ in resumed:
            if resumed.deltas:
                break
        started = time.monotonic()
        await resumed.cancel()
        await resumed.collect()
        waited = time.monotonic() - started
    assert resumed.end is not None and resumed.end["finish_reason"] == "cancelled"
    assert len(resumed.deltas) < 1000  # 2000 paced tokens would take 40 s
    print(f"cancel on the other replica: the end came after {waited * 1000:.0f} ms")


async def test_a_forged_token_is_not_found_on_every_door(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    _, b = replicas
    forged = secrets.token_urlsafe(24)
    async with Client(b.ws_url) as client:
        gen = await client.resume(forged, -1, "x")
        with pytest.raises(ServerError) as caught:
            await gen.collect()
    assert caught.value.code == "unknown_id"
    async with httpx.AsyncClient(timeout=10) as http:
        for token in (forged, "x" * 500, "bad~token!"):
            r = await http.get(f"{b.url}/v1/streams/{token}")
            assert r.status_code == 404, r.text
            assert r.json()["error"]["code"] == "stream_not_found"


async def test_a_killed_replica_s_stream_is_taken_over_where_it_is_followed(
        redis_server: RedisServer, replicas: tuple[ServerProcess, ServerProcess]) -> None:
    """SIGKILL of the replica producing a stream a client follows on another: that one
    takes the stream over (the request again, the logged text as the answer begun) and
    the client's text equals the uninterrupted answer, seqs contiguous."""
    a, b = replicas
    max_tokens = 110  # the script is 120 tokens: cut by max_tokens, through its Japanese
    with running(replica(redis_server)) as doomed:
        async with Client(doomed.ws_url) as first:
            gen, token, seen = await begun(first, PACED, 2, max_tokens=max_tokens)
        async with Client(b.ws_url) as second:
            resumed = await second.resume(token, seen, "again")
            async for _ in resumed:
                if len(resumed.deltas) >= 3:
                    break
            doomed.stop(signal.SIGKILL)
            killed, before = time.monotonic(), len(resumed.deltas)
            gap = None
            async for _ in resumed:
                if gap is None and len(resumed.deltas) > before:
                    gap = time.monotonic() - killed
    assert resumed.end is not None and resumed.end["finish_reason"] == "length", resumed.end
    seqs = [d["seq"] for d in resumed.deltas]
    assert seqs == list(range(seen + 1, seen + 1 + len(seqs)))
    text = "".join(d["text"] for d in gen.deltas) + "".join(d["text"]
                                                            for d in resumed.deltas)
    assert text == await uninterrupted(a, max_tokens)
    assert resumed.end["usage"]["completion_tokens"] == max_tokens
    assert "taken over from a stopped replica" in b.log()
    metrics = (await asyncio.to_thread(httpx.get, b.url + "/metrics")).text
    assert "tokenpipe_state_takeovers_total 1.0" in metrics
    print(f"SIGKILL of the producer: the follower's next delta came {gap:.2f} s after it")


@pytest.mark.model
async def test_a_killed_replica_s_greedy_answer_is_continued_on_the_real_model(
        redis_server: RedisServer) -> None:
    """The same on llama.cpp with the bundled model (split cache: the answer depends on the
    request alone): the answer taken over equals the uninterrupted one byte for byte."""
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    model = ("--engine", "llamacpp", "--state", redis_server.url, "--parallel", "2",
             "--kv-cache", "split", "--resume-grace-s", str(GRACE_S))
    ask = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
    params = {"max_tokens": 160, "temperature": 0}
    with running(ServerProcess(model)) as b:
        async with Client(b.ws_url) as client:
            whole = await (await client.generate(ask, params=params)).collect()
        with running(ServerProcess(model)) as doomed:
            async with Client(doomed.ws_url) as first:
                gen, token, seen = await begun(first, ask, 3, **params)
            async with Client(b.ws_url) as second:
                resumed = await second.resume(token, seen, "again")
                async for _ in resumed:
                    if len(resumed.deltas) >= 3:
                        break
                doomed.stop(signal.SIGKILL)
                await resumed.collect()
        taken = re.search(r"taken over from a stopped replica at seq (\d+), from its token ids",
                          b.log())
        assert taken is not None, b.log()
    text = "".join(d["text"] for d in gen.deltas) + "".join(d["text"]
                                                            for d in resumed.deltas)
    assert resumed.end is not None and resumed.end["finish_reason"] == "length"
    print(f"taken over at seq {taken[1]} of {len(gen.deltas) + len(resumed.deltas)} deltas; "
          f"equal to the uninterrupted answer: {text == whole}")
    assert text == whole


async def test_a_rolling_restart_behind_nginx_breaks_no_stream() -> None:
    """docs/deployment.md's nginx in front of two replicas; resumable streams through it
    from tokenpipe.client; each replica in turn gets SIGTERM (its answers cannot finish in
    its shutdown grace: they are handed over, their sockets closed with 1012) and starts
    again on its port. Every client resumes by itself through nginx and every answer
    equals the uninterrupted one."""
    # the default resume grace (30 s), not this module's short one: a stream may wait
    # out a restart before its client resumes it
    args = ("--shutdown-grace-s", "0.3", "--resume-grace-s", "30")
    # 34 s at 90 ms a token: every restart falls in it, even on a loaded machine where the
    # three restarts took 25 s (at 10 s the streams ended before the restarts did)
    max_tokens, clients = 380, 8
    slow = [{"role": "user", "content": "[[pace_ms=90]][[tokens=400]]"}]
    # the same text unpaced (the fake engine's answer does not depend on its pace)
    fast = [{"role": "user", "content": "[[pace_ms=1]][[tokens=400]]"}]
    # its own Redis: its keys live 30 s (the module's last test checks they expire)
    with running(RedisServer()) as redis_server, contextlib.ExitStack() as stack:
        servers = [stack.enter_context(running(replica(redis_server, *args)))
                   for _ in range(2)]
        stack.callback(lambda: [s.stop() for s in servers])  # those started again too
        nginx = stack.enter_context(running(Nginx([s.port for s in servers])))
        reference = await uninterrupted(servers[0], max_tokens, fast)

        gaps: list[float] = []

        async def one() -> tuple[str, int]:
            async with Client(nginx.ws_url) as client:
                gen = await client.generate(slow, resumable=True,
                                            params={"max_tokens": max_tokens})
                last = time.monotonic()
                async for _ in gen:
                    gaps.append(time.monotonic() - last)
                    last = time.monotonic()
                return gen.text, gen.resumes

        started = time.monotonic()
        runs = [asyncio.create_task(one()) for _ in range(clients)]
        await asyncio.sleep(0.5)
        for i in (0, 1, 0):  # the one serving the streams is hit at least twice
            server = servers[i]
            await asyncio.to_thread(server.stop, signal.SIGTERM)  # hands over, 1012
            servers[i] = ServerProcess(server.args, port=server.port)
            await asyncio.to_thread(servers[i].wait_ready)
            await asyncio.sleep(0.3)
        restarted = time.monotonic() - started
        results = await asyncio.gather(*runs, return_exceptions=True)
        ended = time.monotonic() - started
    broken = [r for r in results if isinstance(r, BaseException) or r[0] != reference]
    resumes = sum(r[1] for r in results if not isinstance(r, BaseException))
    print(f"rolling restart of 2 replicas (3 restarts) under {clients} streams: "
          f"{len(broken)} broken, {resumes} resumes by the client; restarts done after "
          f"{restarted:.1f} s, streams after {ended:.1f} s; the longest wait for a delta "
          f"{max(gaps):.1f} s")
    assert not broken, broken[:2]
    assert resumes >= 2 * clients


def test_redis_unreachable_at_start_refuses_to_start() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    done = subprocess.run([sys.executable, "-m", "tokenpipe", "serve", "--engine", "fake",
                           "--port", str(free_port()), "--state", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"redis://:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in done.stderr, done.stderr
    assert "hunter2" not in done.stderr


async def test_redis_lost_while_serving_costs_only_the_sharing() -> None:
    with running(RedisServer()) as redis_server, running(replica(redis_server)) as server:
        async with Client(server.ws_url) as client:
            live = await client.generate(PACED, resumable=True, params={"max_tokens": 150})
            async for _ in live:
                if len(live.deltas) >= 2:
                    break
            redis_server.stop(signal.SIGKILL)
            text = await live.collect()  # the stream in flight goes on
            assert live.end is not None and len(text) > 0
            # a new resumable stream runs, and resumes on its own replica
            _, resumed, _ = await drop_and_resume(server.ws_url, 40)
            assert resumed.end is not None
        async with httpx.AsyncClient(timeout=10) as http:
            health = (await http.get(server.url + "/health")).json()
            assert health["status"] == "degraded", health
            assert "state store" in health["state"], health
            metrics = (await http.get(server.url + "/metrics")).text
            assert "tokenpipe_state_up 0.0" in metrics
            assert "tokenpipe_state_outages_total 1.0" in metrics
            with running(RedisServer(redis_server.port)) as back:
                deadline = time.monotonic() + 10  # the replica probes it every second
                while (health := (await http.get(server.url + "/health")).json()).get(
                        "state"):
                    assert time.monotonic() < deadline, health
                    await asyncio.sleep(0.2)
                assert health["status"] == "ok", health
                metrics = (await http.get(server.url + "/metrics")).text
                assert "tokenpipe_state_up 1.0" in metrics
                async with Client(server.ws_url) as client:  # streams are logged again
                    gen = await client.generate(PACED, resumable=True,
                                                params={"max_tokens": 5})
                    await gen.collect()
                with back.client() as r:
                    assert r.keys("*:log"), "a stream after the outage is not logged"
        assert server.proc.poll() is None


async def test_no_key_outlives_its_stream(redis_server: RedisServer,
                                          replicas: tuple[ServerProcess, ServerProcess]
                                          ) -> None:
    a, b = replicas
    await drop_and_resume(a.ws_url, 20, resume_url=b.ws_url)
    with redis_server.client() as r:
        assert r.dbsize() > 0
        used = r.info("memory")["used_memory"]
        deadline = time.monotonic() + GRACE_S + 15
        while (keys := r.keys("*")):
            assert time.monotonic() < deadline, [(k, r.pttl(k)) for k in keys]
            await asyncio.sleep(0.25)
    print(f"Redis used {used} B with the streams of this module logged; 0 keys "
          f"{GRACE_S:g} s after their end")



async def test_a_slow_log_write_lets_readers_on_and_keeps_the_stream_shared(
        redis_server: RedisServer) -> None:
    """A batch whose write answers after the call timeout (a loaded machine, not an
    outage): the stream's reader goes on without the gate meanwhile, the batch still
    lands, and the stream stays in the log: another replica's store finds it whole."""
    from tokenpipe.engines.base import PreparedRequest
    from tokenpipe.server.resumable import Held
    from tokenpipe.server.state.redis_store import RedisResumeStore
    from tokenpipe.session import Delta, Finished, GenerationSession
    from tokenpipe.types import FinishReason, GenerationRequest

    store = RedisResumeStore(30.0, redis_server.url)
    real, calls, late_s = store._append, [0], 2.5

    async def append(keys: list[str], args: list[object]) -> object:
        calls[0] += 1
        if calls[0] == 2:  # the second batch's answer comes late
            await asyncio.sleep(late_s)
        return await real(keys, args)

    store._append = append  # type: ignore[assignment]
    session = GenerationSession(PreparedRequest(GenerationRequest(prompt="x"), "x", [1], 8),
                                "m", resumable=True)
    session.bind_cancel(lambda: session.finish(FinishReason.CANCELLED))
    store.keep(Held(session, "first"))
    session.mark_started(1)
    token = session.stream_token
    assert token is not None
    reader = store.take_over(token, -1, None)
    sealer = session.cursor()

    async def add(text: str) -> None:
        session.add_text(text, 1)
        sealer.poll(merge=False)
        await asyncio.sleep(0.05)

    got: list[str] = []

    async def read_until(n: int, within_s: float) -> float:
        started = time.monotonic()
        while len(got) < n:
            assert time.monotonic() - started < within_s, got
            got.extend(e.text for e in reader.poll() if isinstance(e, Delta))
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    try:
        await add("a")
        await read_until(1, 5)  # logged, then read
        await add("b")  # its batch's write answers late
        for text in "cd":
            await add(text)
        waited = await read_until(4, late_s - 0.3)  # not held back for the late answer
        session.finish(FinishReason.STOP)
        sealer.poll(merge=False)
        await asyncio.sleep(late_s + 1.0)  # the late batch lands, then the rest
        assert store.failure is None
        assert token not in store._abandoned
        other = RedisResumeStore(30.0, redis_server.url)
        try:
            held = await other.find(token)
            assert held is not None, "the stream is not in the log"
            await asyncio.sleep(0.5)
            copy = held.session.cursor()
            events = copy.poll()
            assert "".join(e.text for e in events if isinstance(e, Delta)) == "abcd"
            assert any(isinstance(e, Finished) for e in events), events
        finally:
            other.close()
            await other.redis.aclose()
        print(f"a batch answered after {late_s} s: the reader had all four deltas after "
              f"{waited:.2f} s; the log has the whole stream")
    finally:
        sealer.close()
        store.close()
        await store.redis.aclose()
