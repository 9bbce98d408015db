"""Issue 15, the WebSocket half: each attack performed against a real server (fake engine,
loopback), bounded in count and time, with a bystander stream that must not notice.

Figures (bystander's worst stall, RSS over baseline, time until the offender is gone) are
printed on lines starting "figure:" (`pytest -s`); the asserts are generous bounds only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from websockets.client import ClientProtocol
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from tests.conftest import ServerProcess, running
from tests.e2e.hostile import Bystander, rss_mb

pytestmark = pytest.mark.e2e
KEY = "s3cret"


# ---- helpers ----------------------------------------------------------------------------
class RawClient:
    """A WebSocket client on a plain socket with a tiny receive buffer: frames are built by
    websockets' sans-IO ClientProtocol (masked as a client must); after the handshake it
    reads nothing unless asked, like a peer that stopped reading."""

    def __init__(self, ws_url: str, *, rcvbuf: int = 4096) -> None:
        self.proto = ClientProtocol(parse_uri(ws_url), subprotocols=[Subprotocol("tokenpipe.v1")])
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        host, port = ws_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        self.sock.connect((host, int(port)))
        self.proto.send_request(self.proto.connect())
        self.sock.sendall(b"".join(self.proto.data_to_send()))
        self.sock.settimeout(10)
        while not any(isinstance(e, Response) for e in self.proto.events_received()):
            self.proto.receive_data(self.sock.recv(4096))
        assert self.proto.handshake_exc is None, self.proto.handshake_exc

    def text(self, payload: str) -> bytes:
        self.proto.send_text(payload.encode())
        return b"".join(self.proto.data_to_send())

    def ping(self, payload: bytes) -> bytes:
        self.proto.send_ping(payload)
        return b"".join(self.proto.data_to_send())

    def send_until_cut(self, chunk: bytes, seconds: float) -> float | None:
        """Writes `chunk` over and over for at most `seconds`; the time at which the server
        cut the connection, or None if it was still open at the end."""
        self.sock.settimeout(0.2)
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            try:
                self.sock.sendall(chunk)
            except TimeoutError:  # the server stopped reading: its frames wait in our buffer
                continue
            except OSError:  # reset or broken pipe: the server let us go
                return time.monotonic() - start
        return None

    def close(self) -> None:
        self.sock.close()


class RssPeak:
    """Samples the server's RSS every 50 ms in a thread while the block runs."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.peak = 0.0
        self._stop = threading.Event()

    def __enter__(self) -> RssPeak:
        self.baseline = rss_mb(self.server)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(FileNotFoundError, RuntimeError):
                self.peak = max(self.peak, rss_mb(self.server))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth_mb(self) -> float:
        return max(0.0, self.peak - self.baseline)


async def connect(url: str, **kwargs: Any) -> Any:
    ws = await websockets.connect(url, subprotocols=["tokenpipe.v1"], max_size=None,  # type: ignore[list-item]
                                  **kwargs)
    assert json.loads(await ws.recv())["type"] == "hello"
    return ws


async def until(ws: Any, predicate: Any, seen: list[dict[str, Any]],
                within_s: float = 20.0) -> dict[str, Any]:
    """Frames into `seen` until one matches; returns that one."""
    async with asyncio.timeout(within_s):
        while True:
            frame = json.loads(await ws.recv())
            seen.append(frame)
            if predicate(frame):
                return frame  # type: ignore[no-any-return]


def warm_up(server: ServerProcess) -> None:
    """A few generations first, so allocator growth is not counted as the attack's."""
    for _ in range(3):
        httpx.post(server.url + "/v1/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": "[[tokens=300]]"}], "max_tokens": 300})


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake"))) as s:
        warm_up(s)
        yield s


# ---- 1. the API key never reaches the log -----------------------------------------------
@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_api_key_stays_out_of_a_debug_log(fmt: str) -> None:
    bearer = "tokenpipe.bearer." + base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    with running(ServerProcess(("--engine", "fake", "--api-key", KEY, "--log-level", "debug",
                                "--log-format", fmt))) as s:
        for kwargs in ({"additional_headers": {"Authorization": f"Bearer {KEY}",
                                               "Cookie": f"k={KEY}", "X-API-Key": KEY}},
                       {"subprotocols": ["tokenpipe.v1", bearer]}):
            kwargs.setdefault("subprotocols", ["tokenpipe.v1"])
            async with websockets.connect(s.ws_url, **kwargs) as ws:  # type: ignore[arg-type]
                assert json.loads(await ws.recv())["type"] == "hello"
        with pytest.raises(websockets.InvalidStatus):  # a wrong key is logged no more
            async with websockets.connect(s.ws_url, additional_headers={
                    "Authorization": "Bearer wrong-" + KEY}):
                pass
        await asyncio.sleep(0.3)
        log = s.log_path.read_text(errors="replace")
    for secret in (KEY, bearer.rsplit(".", 1)[1], base64.b64encode(KEY.encode()).decode()):
        assert secret not in log, [line for line in log.splitlines() if secret in line][:3]
    assert "sec-websocket-key" in log.lower()  # debug was on: the headers were logged
    assert "[redacted]" in log


# ---- 2. frames that used to close the connection ----------------------------------------
LONE = "\\ud800"
HOSTILE = [  # (what, frame as sent, the field its error must name)
    ("lone surrogate in content", '{"type":"generate","id":"h1","messages":[{"role":"user",'
     f'"content":"x{LONE}y"}}]}}', "messages.0.content"),
    ("lone surrogate in ping data", f'{{"type":"ping","data":"{LONE}"}}', "data"),
    ("lone surrogate in an id", f'{{"type":"generate","id":"{LONE}","prompt":"p"}}', "id"),
    ("lone surrogate in a key", f'{{"type":"ping","data":{{"{LONE}":1}}}}', "data"),
    ("5000-digit integer", '{"type":"ping","data":' + "7" * 5000 + "}", "data"),
    ("5000-digit seed", '{"type":"generate","id":"h2","prompt":"p","params":{"seed":'
     + "7" * 5000 + "}}", "params.seed"),
    ("NaN", '{"type":"ping","data":NaN}', "data"),
    ("Infinity", '{"type":"ping","data":[Infinity]}', "data.0"),
    ("-Infinity", '{"type":"ping","data":-Infinity}', "data"),
    ("1e999", '{"type":"ping","data":1e999}', "data"),
    ("100k nested [", "[" * 100_000, None),
]


async def test_hostile_frames_are_one_bad_request_each_and_disturb_nothing(
    server: ServerProcess,
) -> None:
    tokens = 300
    async with Bystander(server.ws_url, tokens=tokens) as other:
        ws = await connect(server.ws_url)
        await ws.send(json.dumps({"type": "generate", "id": "local", "params": {
            "max_tokens": tokens}, "messages": [{"role": "user", "content":
                                                 f"[[tokens={tokens}]][[pace_ms=10]]"}]}))
        seen: list[dict[str, Any]] = []
        await until(ws, lambda f: f["type"] == "delta", seen)
        for what, text, field in HOSTILE:
            await ws.send(text)
            error = await until(ws, lambda f: f["type"] in ("error", "pong") and
                                f.get("id") != "local", seen)
            assert error["type"] == "error" and error["code"] == "bad_request", (what, error)
            if field is not None:
                assert f"'{field}'" in error["message"], (what, error)
            await ws.send(json.dumps({"type": "ping", "data": what}))  # the socket lives on
            pong = await until(ws, lambda f: f["type"] == "pong", seen)
            assert pong["data"] == what
        end = await until(ws, lambda f: f.get("id") == "local" and f["type"] in
                          ("end", "error"), seen)
        await ws.close()
    other.check()
    assert end["type"] == "end" and end["usage"]["completion_tokens"] == tokens, end
    local = [f for f in seen if f["type"] == "delta" and f["id"] == "local"]
    assert [d["seq"] for d in local] == list(range(len(local)))
    assert "".join(d["text"] for d in local) == other.expected
    print(f"\nfigure: hostile frames ({len(HOSTILE)} kinds): bystander worst stall "
          f"{other.worst_stall_s * 1000:.0f} ms")
    assert other.worst_stall_s < 2.0


# ---- 3. a flooder that never reads ------------------------------------------------------
async def test_a_flooder_that_never_reads_is_bounded_and_closed(server: ServerProcess) -> None:
    async with Bystander(server.ws_url, tokens=1000) as other:
        flooder = await asyncio.to_thread(RawClient, server.ws_url)
        chunk = b"".join([flooder.ping(b"p" * 125) for _ in range(200)]
                         + [flooder.text(json.dumps({"type": "ping", "data": "x" * 100}))
                            for _ in range(200)]
                         + [flooder.text("junk " * 20) for _ in range(200)])
        with RssPeak(server) as rss:
            cut_after = await asyncio.to_thread(flooder.send_until_cut, chunk, 15.0)
        flooder.close()
    other.check()
    print(f"\nfigure: ping+JSON+junk flood ({len(chunk) // 1024} KiB a write, never read): "
          f"bystander worst stall {other.worst_stall_s * 1000:.0f} ms, RSS peak "
          f"+{rss.growth_mb:.1f} MB, cut off after "
          f"{'never' if cut_after is None else f'{cut_after:.1f} s'}")
    assert cut_after is not None, "the flooder was never closed"
    assert rss.growth_mb < 50
    assert other.worst_stall_s < 2.0


async def test_a_flooder_that_reads_gets_one_notice_a_second_then_1008(
    server: ServerProcess,
) -> None:
    ws = await connect(server.ws_url)
    errors: list[dict[str, Any]] = []
    pongs = 0
    start = time.monotonic()

    async def flood() -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            while time.monotonic() - start < 15:
                for _ in range(50):
                    await ws.send('{"type":"ping"}')
                await asyncio.sleep(0)

    sender = asyncio.create_task(flood())
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 20))
            if frame["type"] == "error":
                errors.append(frame)
            else:
                pongs += 1
    elapsed = time.monotonic() - start
    await sender
    print(f"\nfigure: JSON ping flood, reading: {pongs} pongs, {len(errors)} rate_limited "
          f"notices, closed {closed.value.rcvd.code if closed.value.rcvd else None} after "
          f"{elapsed:.1f} s")
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    assert all(e["code"] == "rate_limited" for e in errors)
    assert 1 <= len(errors) <= elapsed + 2  # about one a second, not one per refused frame
    assert elapsed < 12


# ---- 4. shutdown with clients that never read -------------------------------------------
def stuck_reader(ws_url: str) -> RawClient:
    """Starts a long generation and fills the server's send buffer (big pongs), then stops
    reading for good."""
    client = RawClient(ws_url, rcvbuf=2048)
    client.sock.sendall(client.text(json.dumps({
        "type": "generate", "id": "g", "params": {"max_tokens": 5000},
        "messages": [{"role": "user", "content": "[[tokens=5000]][[pace_ms=5]]"}]})))
    big = client.text(json.dumps({"type": "ping", "data": "z" * 900_000}))
    client.send_until_cut(big, 2.0)  # until the server stops reading us, at most 2 s
    return client


def test_shutdown_is_bounded_by_the_grace_with_a_client_that_never_reads() -> None:
    grace = 2.0
    s = ServerProcess(("--engine", "fake", "--shutdown-grace-s", str(grace)))
    with running(s):
        client = stuck_reader(s.ws_url)
        started = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(timeout=60)
        took = time.monotonic() - started
        client.close()
    print(f"\nfigure: SIGTERM with a stuck reader, --shutdown-grace-s {grace:g}: exited "
          f"after {took:.1f} s (code {code})")
    log = s.log_path.read_text(errors="replace")
    assert took < grace + 5, log[-3000:]
    assert "Traceback" not in log


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_second_signal_exits_at_once_and_quietly(sig: signal.Signals) -> None:
    s = ServerProcess(("--engine", "fake", "--shutdown-grace-s", "30"))
    with running(s):
        ws = await connect(s.ws_url)
        await ws.send(json.dumps({"type": "generate", "id": "long", "params": {
            "max_tokens": 3000}, "messages": [{"role": "user",
                                               "content": "[[tokens=3000]][[pace_ms=10]]"}]}))
        await until(ws, lambda f: f["type"] == "delta", [])
        s.proc.send_signal(sig)
        await asyncio.sleep(1.0)  # draining: it would wait up to 30 s for "long"
        assert s.proc.poll() is None
        second = time.monotonic()
        s.proc.send_signal(sig)
        code = await asyncio.to_thread(s.proc.wait, 30)
        took = time.monotonic() - second
        ws.transport.abort()
        log = s.log_path.read_text(errors="replace")
    print(f"\nfigure: second {sig.name}: exited after {took:.2f} s (code {code})")
    assert took < 3.0
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-2000:]
    assert "second signal" in log


# ---- 5. smaller ones ---------------------------------------------------------------------
@pytest.mark.parametrize("headers", [
    [("X-Big", "a" * 9000)],
    [(f"X-H{i}", "v") for i in range(130)],
])
def test_an_upgrade_with_oversized_headers_gets_an_answer(
    server: ServerProcess, headers: list[tuple[str, str]]
) -> None:
    request = (f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tokenpipe.v1\r\n"
               + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):  # read to EOF: the server closes after answering
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head else None
    assert status in (400, 431), answer[:300]
    assert body.strip(), answer[:300]


async def test_resuming_a_running_stream_under_a_new_id_takes_the_old_one_over(
    live_server: Any,
) -> None:
    url = live_server("--engine", "fake", "--max-streams-per-connection", "2")
    ws = await connect(url.replace("http", "ws") + "/ws")
    await ws.send(json.dumps({"type": "generate", "id": "a", "resumable": True, "params": {
        "max_tokens": 200}, "messages": [{"role": "user", "content": "[[pace_ms=10]]"}]}))
    seen: list[dict[str, Any]] = []
    start = await until(ws, lambda f: f["type"] == "start", seen)
    await until(ws, lambda f: f["type"] == "delta", seen)
    last = [f for f in seen if f["type"] == "delta"][-1]["seq"]
    await ws.send(json.dumps({"type": "resume", "stream": start["stream"], "after_seq": last,
                              "id": "b"}))
    moved = await until(ws, lambda f: f.get("id") == "a" and f["type"] == "error", seen)
    assert moved["code"] == "moved"
    # The old id holds no slot: with a limit of 2, "b" and "c" both run.
    await ws.send(json.dumps({"type": "generate", "id": "c", "messages": [
        {"role": "user", "content": "[[tokens=5]]"}]}))
    c_end = await until(ws, lambda f: f.get("id") == "c" and f["type"] in ("end", "error"),
                        seen)
    assert c_end["type"] == "end", c_end
    await ws.send(json.dumps({"type": "cancel", "id": "a"}))
    gone = await until(ws, lambda f: f.get("id") == "a" and f["type"] == "error"
                       and f is not moved, seen)
    assert gone["code"] == "unknown_id"
    await until(ws, lambda f: f.get("id") == "b" and f["type"] == "end", seen)
    await ws.close()
    # "a" may send a few more deltas while the resume is on its way: the client asked for
    # what follows `last`, so "b" starts there; together, once each, nothing lost
    old = [f["seq"] for f in seen if f["type"] == "delta" and f["id"] == "a"]
    new = [f for f in seen if f["type"] == "delta" and f["id"] == "b"]
    assert old == list(range(len(old))) and old[-1] >= last
    assert [d["seq"] for d in new] == list(range(last + 1, last + 1 + len(new)))
    deltas = [f for f in seen if f["type"] == "delta" and f["id"] == "a"
              and f["seq"] <= last] + new
    async with httpx.AsyncClient(timeout=30) as http:
        reference = await http.post(url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "[[pace_ms=0]]"}], "max_tokens": 200})
    assert "".join(d["text"] for d in deltas) == reference.json()["choices"][0]["message"][
        "content"]


async def test_after_seq_beyond_what_was_sent_is_a_bad_request(server: ServerProcess) -> None:
    ws = await connect(server.ws_url)
    await ws.send(json.dumps({"type": "generate", "id": "a", "resumable": True, "params": {
        "max_tokens": 100}, "messages": [{"role": "user", "content": "[[pace_ms=10]]"}]}))
    seen: list[dict[str, Any]] = []
    start = await until(ws, lambda f: f["type"] == "start", seen)
    other = await connect(server.ws_url)
    for after in (10**6, 99):
        await other.send(json.dumps({"type": "resume", "stream": start["stream"],
                                     "after_seq": after, "id": "x"}))
        error = json.loads(await asyncio.wait_for(other.recv(), 10))
        assert error["code"] == "bad_request" and "'after_seq'" in error["message"], error
    await other.close()
    end = await until(ws, lambda f: f["type"] in ("end", "error"), seen)  # undisturbed
    await ws.close()
    assert end["type"] == "end" and end["id"] == "a"
    seqs = [f["seq"] for f in seen if f["type"] == "delta"]
    assert seqs == list(range(len(seqs)))


def _errors_total(url: str, code: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(map(float, re.findall(  # over every `api` (ws, plain)
        rf'^tokenpipe_errors_total{{api="[a-z_]+",code="{code}"}} ([0-9.e+]+)$', text, re.M)))


async def test_refused_connections_per_address_are_counted(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--max-connections-per-client", "1")
    ws_url = url.replace("http", "ws") + "/ws"
    before = _errors_total(url, "rate_limited")
    first = await connect(ws_url)
    for subprotocols in (["tokenpipe.v1"], None):  # JSON mode and plain mode
        async with websockets.connect(ws_url, subprotocols=subprotocols) as refused:  # type: ignore[arg-type]
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await refused.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    await first.close()
    assert _errors_total(url, "rate_limited") - before == 2
