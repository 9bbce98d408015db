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
        metrics = httpx.get(url + "/metrics").text
        if re.search(r'tokenpipe_cancellations_total 8\.0', metrics):
            break
        await asyncio.sleep(0.2)
    assert "tokenpipe_cancellations_total 8.0" in metrics
    assert 'tokenpipe_generations_active{model="fake"} 0.0' in metrics
    assert 'tokenpipe_connections{protocol="tokenpipe.v1"} 0.0' in metrics
    with pytest.raises(websockets.ConnectionClosed):  # once it reads again, it finds the end
        while True:
            await asyncio.wait_for(stuck.recv(), 10)
