"""tokenpipe.client against a scripted tokenpipe.v1 peer on a real socket: what the client
sends, how it routes interleaved frames to their generations, errors, the connection
closing mid-stream, ping, and the bearer subprotocol."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from tokenpipe.client import Client, ServerError, bearer_subprotocol
from tokenpipe.protocol.ws import BEARER_PREFIX, PROTOCOL

Script = Callable[[ServerConnection, list[dict[str, Any]]], Awaitable[None]]


async def recv(ws: ServerConnection, got: list[dict[str, Any]]) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await ws.recv())
    got.append(frame)
    return frame


async def send(ws: ServerConnection, **frame: Any) -> None:
    await ws.send(json.dumps(frame))


@pytest.fixture
async def peer() -> AsyncIterator[Callable[[Script], Awaitable[tuple[str, list[Any]]]]]:
    servers: list[Any] = []

    async def start(script: Script) -> tuple[str, list[Any]]:
        got: list[Any] = []

        async def handler(ws: ServerConnection) -> None:
            got.append({"subprotocol": ws.subprotocol,
                        "authorization": ws.request.headers.get("Authorization")
                        if ws.request else None})
            await send(ws, type="hello", protocol=PROTOCOL)
            await script(ws, got)

        server = await serve(handler, "127.0.0.1", 0, subprotocols=[PROTOCOL])  # type: ignore[list-item]
        servers.append(server)
        port = next(iter(server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}", got

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_interleaved_frames_reach_their_own_generation(peer: Any) -> None:
    async def script(ws: ServerConnection, got: list[Any]) -> None:
        a, b = await recv(ws, got), await recv(ws, got)
        await send(ws, type="start", id=b["id"])
        await send(ws, type="start", id=a["id"])
        await send(ws, type="queued", id=a["id"], position=1)
        for i, (gid, text) in enumerate([(a["id"], "A1"), (b["id"], "B1"), (a["id"], "A2")]):
            await send(ws, type="delta", id=gid, seq=i // 2 if gid == a["id"] else 0,
                       text=text)
        await send(ws, type="end", id=b["id"], finish_reason="stop")
        await send(ws, type="end", id=a["id"], finish_reason="length")
        await ws.wait_closed()

    url, got = await peer(script)
    async with Client(url, api_key="k1") as client:
        assert client.hello["protocol"] == PROTOCOL
        a = await client.generate([{"role": "user", "content": "x"}],
                                  params={"max_tokens": 3}, model="m", resumable=True)
        b = await client.generate(prompt="y", id="mine")
        texts = await asyncio.gather(a.collect(), b.collect())
    assert texts == ["A1A2", "B1"]
    assert a.end is not None and a.end["finish_reason"] == "length" and a.queued == [1]
    assert b.start == {"type": "start", "id": "mine"}
    assert got[0] == {"subprotocol": PROTOCOL, "authorization": "Bearer k1"}
    assert got[1] == {"type": "generate", "id": a.id, "model": "m", "resumable": True,
                      "messages": [{"role": "user", "content": "x"}],
                      "params": {"max_tokens": 3}}
    assert got[2] == {"type": "generate", "id": "mine", "prompt": "y"}


async def test_an_error_frame_raises_with_its_code_and_others_go_on(peer: Any) -> None:
    async def script(ws: ServerConnection, got: list[Any]) -> None:
        bad, good = await recv(ws, got), await recv(ws, got)
        await send(ws, type="error", id=bad["id"], code="context_overflow", message="too long")
        await send(ws, type="error", id=None, code="bad_request", message="not json")
        await send(ws, type="delta", id=good["id"], seq=0, text="ok")
        await send(ws, type="end", id=good["id"], finish_reason="stop")
        await ws.wait_closed()

    url, _ = await peer(script)
    async with Client(url) as client:
        bad = await client.generate(prompt="a")
        good = await client.generate(prompt="b")
        with pytest.raises(ServerError) as info:
            await bad.collect()
        assert (info.value.code, info.value.message) == ("context_overflow", "too long")
        assert await good.collect() == "ok"
        assert (await client.errors.get())["code"] == "bad_request"


async def test_the_connection_closing_mid_stream_ends_the_generation(peer: Any) -> None:
    async def script(ws: ServerConnection, got: list[Any]) -> None:
        gen = await recv(ws, got)
        await send(ws, type="delta", id=gen["id"], seq=0, text="half")
        await ws.close()

    url, _ = await peer(script)
    async with Client(url) as client:
        gen = await client.generate(prompt="a")
        with pytest.raises(ServerError) as info:
            await gen.collect()
    assert info.value.code == "connection_closed" and gen.text == "half"


async def test_ping_cancel_and_resume_frames(peer: Any) -> None:
    async def script(ws: ServerConnection, got: list[Any]) -> None:
        ping = await recv(ws, got)
        await send(ws, type="pong", data=ping["data"])
        await recv(ws, got)  # cancel
        resume = await recv(ws, got)
        await send(ws, type="delta", id=resume["id"], seq=4, text="rest")
        await send(ws, type="end", id=resume["id"], finish_reason="stop")
        await ws.wait_closed()

    url, got = await peer(script)
    async with Client(url) as client:
        assert await client.ping({"n": 1}) == {"n": 1}
        await client.send({"type": "cancel", "id": "old"})
        resumed = await client.resume("tok", 3, "r1")
        assert await resumed.collect() == "rest"
    assert got[2] == {"type": "cancel", "id": "old"}
    assert got[3] == {"type": "resume", "stream": "tok", "after_seq": 3, "id": "r1"}


def test_the_bearer_subprotocol_carries_the_key_base64url_unpadded() -> None:
    proto = bearer_subprotocol("k/+?")
    assert proto.startswith(BEARER_PREFIX) and "=" not in proto
    encoded = proto[len(BEARER_PREFIX):]
    assert base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)) == b"k/+?"
