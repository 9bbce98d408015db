"""Flow control over real sockets: a client that stops reading is dropped after a bound,
its generations stop, and other clients are served meanwhile. (Merging for a slow reader
is shown with a socket whose sends we hold, in tests/test_ws_connection.py: real TCP buffers
absorb megabytes before a server ever sees backpressure.)"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
import websockets

from tokenpipe.client import Client

pytestmark = pytest.mark.e2e


async def test_a_client_that_stops_reading_is_dropped_and_others_flow(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--ctx-size", "4000000", "--slow-client-timeout-s",
                      "1", "--max-message-bytes", "2000000")
    ws_url = url.replace("http", "ws") + "/ws"
    big = "[[echo]]" + "ab" * 150_000
    # max_queue=1: the client library stops reading its socket once one frame waits.
    stuck = await websockets.connect(ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                     max_queue=1, max_size=None)
    await stuck.recv()
    for i in range(8):
        await stuck.send(json.dumps({"type": "generate", "id": f"s{i}", "prompt": big,
                                     "params": {"max_tokens": 1_000_000}}))
    async with Client(ws_url) as other:  # meanwhile another client is served in full
        gen = await other.generate(prompt="[[tokens=500]]", params={"max_tokens": 500})
        assert len(await gen.collect()) > 0
        assert gen.end is not None and gen.end["finish_reason"] == "stop"

    metrics = ""
    for _ in range(100):  # the stuck client is dropped within the bound, its work cancelled
        metrics = (await asyncio.to_thread(httpx.get, url + "/metrics")).text
        if re.search(r'tokenpipe_cancellations_total\{api="ws"\} 8\.0', metrics):
            break
        await asyncio.sleep(0.2)
    assert 'tokenpipe_cancellations_total{api="ws"} 8.0' in metrics
    assert 'tokenpipe_generations_active{model="fake"} 0.0' in metrics
    assert 'tokenpipe_connections{protocol="tokenpipe.v1"} 0.0' in metrics
    with pytest.raises(websockets.ConnectionClosed):  # once it reads again, it finds the end
        while True:
            await asyncio.wait_for(stuck.recv(), 10)


async def test_a_slow_reader_gets_merged_deltas_over_a_real_socket(live_server: Any) -> None:
    """The server writes frames straight into uvicorn's connection while the socket takes
    them, one delta per piece; once the socket backs up, what piles up goes merged."""
    import socket

    from tokenpipe.engines.fake import FakeEngine
    from tokenpipe.types import EngineText, GenerationRequest, SamplingParams

    n = 300_000
    prompt = f"[[tokens={n}]]"
    engine = FakeEngine(context_tokens=10 * n)
    prepared = engine.prepare(GenerationRequest(prompt=prompt, params=SamplingParams(
        max_tokens=n)), n)
    expected = "".join([e.text async for e in engine.stream(prepared)
                        if isinstance(e, EngineText)])

    url = live_server("--engine", "fake", "--ctx-size", str(10 * n))
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
    sock.connect((host, int(port)))
    slow = await websockets.connect(url.replace("http", "ws") + "/ws", sock=sock,
                                    subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                    max_queue=1, max_size=None)
    await slow.recv()
    for i in range(2):
        await slow.send(json.dumps({"type": "generate", "id": f"g{i}", "prompt": prompt,
                                    "params": {"max_tokens": n}}))
    await asyncio.sleep(3.0)  # not reading: the kernel's buffers fill, then the transport's
    deltas: dict[str, list[dict[str, Any]]] = {"g0": [], "g1": []}
    ends = 0
    while ends < 2:
        frame = json.loads(await asyncio.wait_for(slow.recv(), 30))
        if frame["type"] == "delta":
            deltas[frame["id"]].append(frame)
        elif frame["type"] in ("end", "error"):
            assert frame["type"] == "end" and frame["usage"]["completion_tokens"] == n
            ends += 1
    await slow.close()
    for got in deltas.values():
        assert [d["seq"] for d in got] == list(range(len(got)))
        assert "".join(d["text"] for d in got) == expected
        assert min(len(d["text"]) for d in got) <= 3  # one piece each while it flowed
    longest = max(len(d["text"]) for got in deltas.values() for d in got)
    assert longest > 1000  # merged while backed up
