"""The lean HTTP/1.1 client (tokenpipe.http), alone, against a raw asyncio server that
answers with exactly the bytes each test gives it: framing split anywhere, keep-alive
reuse, a pooled connection the server closed, failures before and after the first byte."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpipe import http
from tokenpipe.http.connection import HIGH_WATER


class RawServer:
    """Answers each request with the next item of `answers`: bytes, written in pieces of
    `split` bytes (each piece flushed on its own), then closes if `close` is set."""

    def __init__(self) -> None:
        self.answers: list[tuple[bytes, bool]] = []
        self.split = 0
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> RawServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                data, close = self.answers.pop(0)
                step = self.split or len(data) or 1
                for i in range(0, len(data), step):
                    writer.write(data[i:i + step])
                    await writer.drain()
                    if self.split:
                        await asyncio.sleep(0)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def server() -> AsyncIterator[RawServer]:
    raw = await RawServer().start()
    yield raw
    await raw.stop()


def chunked(*pieces: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return body + b"0\r\n" + trailer + b"\r\n"


HEAD_CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")


async def fetch(origin: http.Origin, body: bytes = b"{}") -> tuple[http.Connection, bytes]:
    conn = await origin.request("POST", "/v1/chat/completions", body,
                                {"content-type": "application/json"})
    data = await conn.read()
    conn.release()
    return conn, data


async def test_chunked_answer_and_the_request_it_sent(server: RawServer) -> None:
    server.answers = [(HEAD_CHUNKED + chunked(b"data: 1\n\n", b"data: 2\n\n"), False)]
    origin = http.Origin(server.url + "/prefix/")
    conn, data = await fetch(origin, b'{"a": 1}')
    assert conn.status == 200 and conn.headers["content-type"] == "text/event-stream"
    assert data == b"data: 1\n\ndata: 2\n\n"
    request = server.requests[0]
    assert request.startswith(b"POST /prefix/v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nhost: 127.0.0.1:" in request and b"\r\ncontent-length: 8\r\n" in request
    assert request.endswith(b'\r\n\r\n{"a": 1}')
    origin.close()


@settings(max_examples=30, deadline=None)
@given(split=st.integers(min_value=1, max_value=40))
def test_framing_split_anywhere(split: int) -> None:
    async def main() -> None:
        raw = await RawServer().start()
        raw.split = split
        payload = "data: {\"content\": \"日本 🎉\"}\n\n".encode()
        raw.answers = [
            (HEAD_CHUNKED + chunked(payload, payload[:7], payload[7:],
                                    trailer=b"X-Trailer: 1\r\n"), False),
            (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\n{\"error\":1}", False),
            (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
             False),
        ]
        origin = http.Origin(raw.url)
        try:
            assert (await fetch(origin))[1] == payload * 2
            conn, data = await fetch(origin)
            assert (conn.status, data) == (400, b'{"error":1}')
            conn, data = await fetch(origin)
            assert (conn.status, data) == (200, b"ok")
            assert raw.connections == 1  # one keep-alive connection carried all three
        finally:
            origin.close()
            await raw.stop()

    asyncio.run(main())


async def test_receive_gives_what_arrived_and_none_at_the_end(server: RawServer) -> None:
    server.split = 5
    server.answers = [(HEAD_CHUNKED + chunked(b"abc", b"defgh"), False)]
    origin = http.Origin(server.url)
    conn = await origin.request("GET", "/", b"")
    got = b""
    while (data := await conn.receive()) is not None:
        assert data
        got += data
    assert got == b"abcdefgh"
    assert await conn.receive() is None
    conn.release()
    origin.close()


async def test_close_delimited_body_is_not_reused(server: RawServer) -> None:
    server.answers = [(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", True),
                      (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", False)]
    origin = http.Origin(server.url)
    assert (await fetch(origin))[1] == b"until the end"
    conn, data = await fetch(origin)
    assert (conn.status, data) == (200, b"")
    assert server.connections == 2
    origin.close()


async def test_connection_close_header_is_honoured(server: RawServer) -> None:
    server.answers = [(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
                       True),
                      (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny", False)]
    origin = http.Origin(server.url)
    assert (await fetch(origin))[1] == b"x"
    assert (await fetch(origin))[1] == b"y"
    assert server.connections == 2
    origin.close()


async def test_a_pooled_connection_the_server_closed_is_replaced(server: RawServer) -> None:
    # The server answers once and closes: the pooled connection is dead when reused.
    server.answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", True)]
    origin = http.Origin(server.url)
    assert (await fetch(origin))[1] == b"a"
    server.answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", False)]
    assert (await fetch(origin))[1] == b"b"
    assert server.connections == 2
    origin.close()


async def until(predicate: object, what: str) -> None:
    async with asyncio.timeout(5):
        while not predicate():  # type: ignore[operator]  # noqa: ASYNC110 - pool state
            await asyncio.sleep(0.005)


async def test_a_server_that_hangs_up_after_each_answer_finds_a_spare_waiting(
        server: RawServer) -> None:
    # llama-server closes the connection after every streamed answer: the next request
    # should not pay for a connect, so a spare is opened as soon as the answer ends.
    server.answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", True),
                      (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", True)]
    origin = http.Origin(server.url)
    first, data = await fetch(origin)
    assert data == b"a"
    await until(lambda: [c for c in origin._idle if c is not first], "a spare connection")
    assert server.connections == 2 and len(server.requests) == 1 and len(origin._idle) == 1
    spare = origin._idle[0]
    conn, data = await fetch(origin)
    assert conn is spare and data == b"b"
    await until(lambda: server.connections == 3, "its own replacement, for the next")
    origin.close()


async def test_spares_stop_when_the_server_closes_them_at_once(server: RawServer) -> None:
    # The server closes every connection that brings no request (no answers left): a spare
    # that lived under a second is not replaced, so there is no connect loop.
    server.answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", True)]
    origin = http.Origin(server.url)
    assert (await fetch(origin))[1] == b"a"
    await until(lambda: server.connections == 2, "the spare connection")
    await asyncio.sleep(0.2)
    assert server.connections == 2 and origin._idle == []
    origin.close()


async def test_no_spares_when_turned_off(server: RawServer) -> None:
    server.answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", True)]
    origin = http.Origin(server.url, spares=False)
    assert (await fetch(origin))[1] == b"a"
    await asyncio.sleep(0.1)
    assert server.connections == 1
    origin.close()


async def test_cut_mid_body_is_a_remote_protocol_error(server: RawServer) -> None:
    server.answers = [(HEAD_CHUNKED + b"9\r\ndata: 1\n\n\r\n20\r\ndata: cut", True)]
    origin = http.Origin(server.url)
    conn = await origin.request("POST", "/", b"")
    got = b""
    with pytest.raises(http.RemoteProtocolError, match="before the answer ended"):
        while (data := await conn.receive()) is not None:
            got += data
    assert got.startswith(b"data: 1\n\n")  # what arrived before the cut was passed on
    conn.release()
    origin.close()


async def test_no_answer_at_all_is_a_remote_protocol_error(server: RawServer) -> None:
    server.answers = [(b"", True)]
    origin = http.Origin(server.url)
    with pytest.raises(http.RemoteProtocolError, match="without sending a response"):
        await origin.request("POST", "/", b"")
    origin.close()


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nbroken header line\r\n\r\n",
    HEAD_CHUNKED + b"zz\r\n",
    HEAD_CHUNKED + b"3\r\nabcXY",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
])
async def test_malformed_answers_are_protocol_errors(server: RawServer, answer: bytes) -> None:
    server.answers = [(answer, False)]
    origin = http.Origin(server.url)
    with pytest.raises(http.RemoteProtocolError):
        conn = await origin.request("POST", "/", b"")
        await conn.read()
    origin.close()


async def test_refused_connection_is_a_connect_error() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    origin = http.Origin(f"http://127.0.0.1:{port}")
    with pytest.raises(http.ConnectError):
        await origin.request("GET", "/", b"", connect_timeout_s=5)


async def test_abandoned_answer_closes_the_connection(server: RawServer) -> None:
    """What a cancel relies on: the upstream sees its client leave."""
    server.answers = [(HEAD_CHUNKED + b"5\r\nhello\r\n", False)]
    origin = http.Origin(server.url)
    conn = await origin.request("POST", "/", b"")
    assert await conn.receive() == b"hello"
    conn.release()  # not read to its end: closed, not pooled
    assert conn.transport is not None and conn.transport.is_closing()
    assert not origin._idle
    origin.close()


async def test_a_slow_reader_pauses_the_socket(server: RawServer) -> None:
    big = b"x" * (HIGH_WATER * 3)
    server.answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big, False)]
    origin = http.Origin(server.url)
    conn = await origin.request("GET", "/", b"")
    for _ in range(200):
        await asyncio.sleep(0.005)
        if conn._paused:
            break
    assert conn._paused  # stopped reading at the high-water mark instead of buffering it all
    assert await conn.read() == big
    conn.release()
    origin.close()


def test_urls() -> None:
    assert http.Origin("https://example.com").port == 443
    assert http.Origin("https://example.com").host_header == "example.com"
    assert http.Origin("http://[::1]:8000/x").host_header == "[::1]:8000"
    with pytest.raises(ValueError):
        http.Origin("ftp://example.com")


@pytest.mark.parametrize("pooled", [True, False])
async def test_a_request_cancelled_before_its_answer_closes_its_connection(
        pooled: bool) -> None:
    """An upstream that queues a request sends nothing for a while: a cancel then (the
    client left) must still close the connection, or the upstream generates for nobody."""
    closed = asyncio.Event()
    got_request = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered = False
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                if pooled and not answered:
                    answered = True
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
                    continue
                got_request.set()  # queued: no answer
                if await reader.read(1) == b"":
                    break
        closed.set()
        writer.close()

    upstream = await asyncio.start_server(handle, "127.0.0.1", 0)
    origin = http.Origin(f"http://127.0.0.1:{upstream.sockets[0].getsockname()[1]}")
    try:
        if pooled:
            assert (await fetch(origin))[1] == b"a" and len(origin._idle) == 1
        task = asyncio.create_task(origin.request("POST", "/", b""))
        async with asyncio.timeout(5):
            await got_request.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with asyncio.timeout(5):
            await closed.wait()
    finally:
        origin.close()
        upstream.close()
        await upstream.wait_closed()


async def test_send_now_writes_on_an_idle_connection_and_request_takes_it_over(
        server: RawServer) -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"
    server.answers = [(ok + b"a", False), (ok + b"b", False),
                      (b"", True),  # reads the next request, closes without a word
                      (ok + b"c", False)]
    origin = http.Origin(server.url, spares=False)
    assert origin.send_now(origin.encode("POST", "/", b"")) is None  # nothing idle yet
    assert (await fetch(origin))[1] == b"a"
    conn = origin.send_now(origin.encode("POST", "/x", b"{}"))
    assert conn is not None and not origin._idle
    got = await origin.request("POST", "/x", b"{}", sent=conn)
    assert got is conn and await got.read() == b"b"
    got.release()
    # the upstream drops the connection the request went out on, unanswered: nothing was
    # processed, so the same request goes again on a new connection
    conn = origin.send_now(origin.encode("POST", "/y", b"{}"))
    assert conn is not None
    got = await origin.request("POST", "/y", b"{}", sent=conn)
    assert got is not conn and await got.read() == b"c"
    got.release()
    assert server.connections == 2
    paths = [r.split(b" ")[1] for r in server.requests]
    assert paths == [b"/v1/chat/completions", b"/x", b"/y", b"/y"]
    origin.close()


async def test_bytes_after_a_complete_answer_leave_the_connection_unused(
        server: RawServer) -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"
    server.answers = [(ok + b"a" + b"HTTP/1.1 200 OK\r\n", False), (ok + b"b", False)]
    origin = http.Origin(server.url, spares=False)
    assert (await fetch(origin))[1] == b"a"
    assert not origin._idle  # those bytes answer no request: the connection is not reused
    assert (await fetch(origin))[1] == b"b"
    assert server.connections == 2
    origin.close()


async def test_http_1_0_keeps_alive_only_when_asked(server: RawServer) -> None:
    server.answers = [(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\na", False),
                      (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n"
                       b"\r\nb", False),
                      (b"HTTP/1.1 204 No Content\r\n\r\n", False)]
    origin = http.Origin(server.url, spares=False)
    assert (await fetch(origin))[1] == b"a"
    assert (await fetch(origin))[1] == b"b"
    conn, data = await fetch(origin)
    assert (conn.status, conn.reason, data) == (204, "No Content", b"")
    assert server.connections == 2  # the second connection carried the last two
    origin.close()


async def test_a_head_that_never_ends_is_refused(server: RawServer) -> None:
    server.answers = [(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (100 * 1024), False)]
    origin = http.Origin(server.url)
    with pytest.raises(http.RemoteProtocolError, match="head is too large"):
        await origin.request("GET", "/", b"")
    origin.close()


async def test_fetch_reads_the_whole_answer_and_pools_the_connection(
        server: RawServer) -> None:
    server.answers = [(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nX-A: 1\r\n"
                       b"x-a: 2\r\n" + b"Transfer-Encoding: chunked\r\n\r\n"
                       + chunked(b'{"error":', b' "loading"}'), False)]
    origin = http.Origin(server.url, spares=False)
    response = await origin.fetch("GET", "/health", headers={"authorization": "Bearer k"},
                                  timeout_s=5)
    assert response.status == 503 and response.body == b'{"error": "loading"}'
    assert response.headers["retry-after"] == "2" and response.headers["x-a"] == "1, 2"
    assert len(origin._idle) == 1  # read to its end: kept for the next request
    assert server.requests[0].startswith(b"GET /health HTTP/1.1\r\n")
    assert b"\r\nauthorization: Bearer k\r\n" in server.requests[0]
    origin.close()


async def test_fetch_past_its_timeout_closes_the_connection() -> None:
    closed = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")  # then nothing
        await reader.read(1)  # b"" once the client closes
        closed.set()
        writer.close()

    silent = await asyncio.start_server(handle, "127.0.0.1", 0)
    origin = http.Origin(f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}",
                         spares=False)
    try:
        with pytest.raises(TimeoutError):
            await origin.fetch("GET", "/v1/models", timeout_s=0.2)
        async with asyncio.timeout(5):
            await closed.wait()
        assert not origin._idle
    finally:
        origin.close()
        silent.close()
        await silent.wait_closed()
