"""`tokenpipe serve --engine openai` takes the lean HTTP client (tokenpipe.http, the fast
path) for everything it asks its upstream: the streams, the model list and the health
checks. Read off the wire: a raw upstream records each request's bytes as they arrive, and
every one is exactly what tokenpipe.http writes, head and body in one write (httpx, the
client this replaced for listings and health, writes other headers and its body apart)."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import ServerProcess, running
from tokenpipe.http import Origin

pytestmark = pytest.mark.e2e

KEY = "upstream-secret"
MODELS = json.dumps({"object": "list", "data": [{"id": "lean-model", "object": "model"}]})


def _sse(*chunks: dict[str, object]) -> bytes:
    events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    events += b"data: [DONE]\n\n"
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)


STREAM = _sse({"choices": [{"index": 0, "delta": {"content": "hi"}}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
              {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}})


@dataclass
class Seen:
    request: bytes  # the whole request
    first_read: bytes  # what the first recv() of it returned


class RecordingUpstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[Seen] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> RecordingUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        upstream: RecordingUpstream = self.server  # type: ignore[assignment]
        buf = b""
        while True:
            first = b""
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                first = first or buf + data
                buf += data
            head, _, rest = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += sock.recv(65536)
            request, buf = head + b"\r\n\r\n" + rest[:length], rest[length:]
            upstream.seen.append(Seen(request, first or request))
            sock.sendall(self._answer(head.split(b" ")[1]))

    @staticmethod
    def _answer(path: bytes) -> bytes:
        if path == b"/v1/chat/completions":
            return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n" + STREAM)
        body = MODELS.encode() if path == b"/v1/models" else b"{}"
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d" \
               b"\r\n\r\n%s" % (len(body), body)


@pytest.fixture
def upstream() -> Iterator[RecordingUpstream]:
    with RecordingUpstream() as server:
        yield server


def _split(request: bytes) -> tuple[str, str, bytes]:
    head, _, body = request.partition(b"\r\n\r\n")
    method, path, _ = head.split(b"\r\n")[0].decode().split(" ")
    return method, path, body


def test_serve_sends_every_upstream_request_through_the_lean_client(
        upstream: RecordingUpstream) -> None:
    auth = {"authorization": f"Bearer {KEY}"}
    with running(ServerProcess(("--engine", "openai", "--upstream", upstream.url,
                                "--upstream-key", KEY))) as proxy:
        for _ in range(2):
            answer = httpx.post(proxy.url + "/v1/chat/completions", timeout=30, json={
                "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5})
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == "hi"
        deadline = time.monotonic() + 20  # a health check every 2 s
        while not any(_split(s.request)[1] == "/health" for s in upstream.seen):
            assert time.monotonic() < deadline, "no health check reached the upstream"
            time.sleep(0.1)
    lean = Origin(upstream.url)
    kinds = set()
    for seen in upstream.seen:
        method, path, body = _split(seen.request)
        headers = ({"content-type": "application/json", "accept": "text/event-stream",
                    **auth} if method == "POST" else auth)
        assert seen.request == lean.encode(method, path, body, headers), seen.request
        kinds.add((method, path))
        if method == "POST":
            assert seen.first_read == seen.request  # head and body in one write
            sent = json.loads(body)
            assert sent["model"] == "lean-model" and sent["stream"] is True
    assert kinds == {("GET", "/v1/models"), ("GET", "/health"),
                     ("POST", "/v1/chat/completions")}
