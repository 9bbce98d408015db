"""Resume after a cut connection, graceful shutdown, and the per-connection limits, on a
real server with the fake engine (where timing must be controlled)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from typing import Any

import pytest
import websockets

from tests.conftest import ServerProcess
from tokenpipe.client import Client, ServerError

pytestmark = pytest.mark.e2e

SLOW = [{"role": "user", "content": "[[pace_ms=15]]"}]


async def connect(url: str) -> Any:
    ws = await websockets.connect(url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
    assert json.loads(await ws.recv())["type"] == "hello"
    return ws


async def recv(ws: Any, within_s: float = 20.0) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), within_s))  # type: ignore[no-any-return]


async def test_resume_after_a_cut_tcp_connection_loses_and_repeats_nothing(
    fake_server: ServerProcess,
) -> None:
    async with Client(fake_server.ws_url) as client:
        reference = await client.generate(messages=SLOW)
        expected = await reference.collect()

    ws = await connect(fake_server.ws_url)
    await ws.send(json.dumps({"type": "generate", "id": "r1", "messages": SLOW,
                              "resumable": True}))
    start = await recv(ws)
    assert start["type"] == "start" and len(start["stream"]) >= 22
    before: list[dict[str, Any]] = []
    while len(before) < 5:
        frame = await recv(ws)
        assert frame["type"] == "delta"
        before.append(frame)
    ws.transport.abort()  # no close frame: the TCP connection just dies

    await asyncio.sleep(0.3)  # the generation runs on, buffered, meanwhile
    ws2 = await connect(fake_server.ws_url)
    await ws2.send(json.dumps({"type": "resume", "stream": start["stream"],
                               "after_seq": before[-1]["seq"], "id": "again"}))
    after: list[dict[str, Any]] = []
    while True:
        frame = await recv(ws2)
        if frame["type"] == "start":
            continue
        assert frame["id"] == "again"
        if frame["type"] == "end":
            break
        after.append(frame)
    await ws2.close()
    seqs = [f["seq"] for f in before + after]
    assert seqs == list(range(len(seqs)))  # no gap, no repeat
    assert "".join(f["text"] for f in before + after) == expected


async def test_resume_with_an_unknown_token_is_refused(fake_server: ServerProcess) -> None:
    ws = await connect(fake_server.ws_url)
    await ws.send(json.dumps({"type": "resume", "stream": "nope", "after_seq": -1}))
    error = await recv(ws)
    await ws.close()
    assert error["type"] == "error" and error["code"] == "unknown_id"


async def test_resume_from_another_connection_moves_the_stream(
    fake_server: ServerProcess,
) -> None:
    first = await connect(fake_server.ws_url)
    await first.send(json.dumps({"type": "generate", "id": "m", "messages": SLOW,
                                 "resumable": True}))
    start = await recv(first)
    await recv(first)  # a delta
    second = await connect(fake_server.ws_url)
    await second.send(json.dumps({"type": "resume", "stream": start["stream"],
                                  "after_seq": -1}))
    while (frame := await recv(first))["type"] != "error":
        assert frame["type"] == "delta"
    assert frame["code"] == "moved" and frame["id"] == "m"
    texts = []
    while (frame := await recv(second))["type"] != "end":
        if frame["type"] == "delta":
            texts.append(frame)
    assert [f["seq"] for f in texts] == list(range(len(texts)))  # replayed from the start
    await first.close()
    await second.close()


async def test_resumable_stream_is_forgotten_after_the_grace_period(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--resume-grace-s", "0.5")
    ws_url = url.replace("http", "ws") + "/ws"
    ws = await connect(ws_url)
    await ws.send(json.dumps({"type": "generate", "id": "g", "resumable": True,
                              "messages": [{"role": "user", "content": "[[tokens=3]]"}]}))
    start = await recv(ws)
    while (await recv(ws))["type"] != "end":
        pass
    await ws.close()
    await asyncio.sleep(1.5)
    ws2 = await connect(ws_url)
    await ws2.send(json.dumps({"type": "resume", "stream": start["stream"], "after_seq": -1}))
    error = await recv(ws2)
    await ws2.close()
    assert error["code"] == "unknown_id"


async def test_graceful_shutdown_ends_every_stream_with_a_final_frame() -> None:
    server = ServerProcess(("--engine", "fake", "--shutdown-grace-s", "1"))
    server.wait_ready()
    try:
        ws = await connect(server.ws_url)
        await ws.send(json.dumps({"type": "generate", "id": "short", "messages": [
            {"role": "user", "content": "[[pace_ms=10]][[tokens=40]]"}]}))
        await ws.send(json.dumps({"type": "generate", "id": "long", "messages": [
            {"role": "user", "content": "[[pace_ms=50]]"}], "params": {"max_tokens": 2000}}))
        while (await recv(ws))["type"] != "delta":
            pass
        server.proc.send_signal(signal.SIGTERM)
        finals: dict[str, dict[str, Any]] = {}
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                frame = await recv(ws)
                if frame["type"] in ("end", "error"):
                    finals[frame["id"]] = frame
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        assert finals["short"]["type"] == "end"
        assert finals["short"]["finish_reason"] == "stop"
        assert finals["long"]["type"] == "error"
        assert finals["long"]["code"] == "shutting_down"
        # uvicorn re-raises the captured SIGTERM once it has shut down cleanly
        assert server.proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in server.log()
    finally:
        server.stop()


async def test_frames_per_second_limit_answers_rate_limited(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--max-frames-per-second", "5")
    ws = await connect(url.replace("http", "ws") + "/ws")
    for i in range(14):  # a burst of 10 passes; the 4 over it are refused or held back
        await ws.send(json.dumps({"type": "ping", "data": i}))
    frames = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(2.5):
            while True:
                frames.append(await recv(ws))
    pongs = [f["data"] for f in frames if f["type"] == "pong"]
    assert pongs[:10] == list(range(10)) and pongs == sorted(pongs)
    limited = [f for f in frames if f["type"] == "error"]
    assert limited and all(f["code"] == "rate_limited" and f["retry_after_ms"] > 0
                           for f in limited)
    assert len(limited) <= 3  # one notice a second at most, not one per refused frame
    await asyncio.sleep(1.0)
    await ws.send(json.dumps({"type": "ping", "data": "later"}))
    assert (await recv(ws)) == {"type": "pong", "data": "later"}  # the connection lives on
    await ws.close()


async def test_connections_per_client_address_are_limited(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--max-connections-per-client", "2")
    ws_url = url.replace("http", "ws") + "/ws"
    a, b = await connect(ws_url), await connect(ws_url)
    c = await websockets.connect(ws_url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
    error = await recv(c)
    assert error["code"] == "rate_limited"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await c.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    await a.close()
    await asyncio.sleep(0.2)
    d = await connect(ws_url)  # a freed place can be taken again
    await d.close()
    await b.close()


async def test_prompt_token_limit(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--max-prompt-tokens", "50")
    async with Client(url.replace("http", "ws") + "/ws") as client:
        gen = await client.generate(prompt="x" * 500)
        with pytest.raises(ServerError) as info:
            await gen.collect()
        assert info.value.code == "context_overflow"
        ok = await client.generate(prompt="short [[tokens=3]]")
        assert await ok.collect()
