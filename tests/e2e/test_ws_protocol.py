"""tokenpipe.v1 over a real server on the fake engine: every frame docs/protocol.md section 1
names, multiplexing, cancel, and bad input that must leave other streams intact."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ServerProcess
from tokenpipe.client import Client, ServerError
from tokenpipe.engines.fake import SCRIPT

pytestmark = pytest.mark.e2e

USER = [{"role": "user", "content": "hello"}]


async def frames_until(ws: Any, predicate: Any, within_s: float = 10.0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(within_s):
        while True:
            frame = json.loads(await ws.recv())
            out.append(frame)
            if predicate(frame):
                return out


async def raw(server: ServerProcess) -> Any:
    ws = await websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
    hello = json.loads(await ws.recv())
    assert hello["type"] == "hello"
    return ws


async def test_hello_announces_protocol_models_and_limits(fake_server: ServerProcess) -> None:
    async with websockets.connect(fake_server.ws_url, subprotocols=["tokenpipe.v1"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "tokenpipe.v1"
        hello = json.loads(await ws.recv())
    assert hello["protocol"] == "tokenpipe.v1"
    assert hello["models"] == ["fake"]
    assert set(hello["limits"]) == {"max_message_bytes", "max_streams_per_connection",
                                    "context_tokens", "max_tokens", "default_max_tokens"}
    assert hello["server"].startswith("tokenpipe/")


async def test_generate_streams_start_deltas_end(fake_server: ServerProcess) -> None:
    ws = await raw(fake_server)
    await ws.send(json.dumps({"type": "generate", "id": "a", "messages": USER}))
    frames = await frames_until(ws, lambda f: f["type"] == "end")
    await ws.close()
    assert frames[0]["type"] == "start" and frames[0]["id"] == "a"
    assert frames[0]["model"] == "fake" and frames[0]["prompt_tokens"] > 0
    deltas = [f for f in frames if f["type"] == "delta"]
    assert [d["seq"] for d in deltas] == list(range(len(deltas)))
    assert all(d["text"] for d in deltas)
    assert "".join(d["text"] for d in deltas) == SCRIPT
    end = frames[-1]
    assert end["finish_reason"] == "stop"
    assert end["usage"]["completion_tokens"] > 0
    assert set(end["timing"]) == {"queue_ms", "ttft_ms", "total_ms", "tokens_per_s",
                                  "drafted_tokens", "accepted_tokens"}


async def test_many_generations_multiplex_on_one_socket(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        gens = [await client.generate(messages=[{"role": "user", "content": f"[[echo]] n{i}"}],
                                      params={"max_tokens": 50})
                for i in range(8)]
        texts = await asyncio.gather(*(g.collect() for g in gens))
    assert texts == [f"n{i}" for i in range(8)]
    assert all(g.end and g.end["finish_reason"] == "stop" for g in gens)


async def test_max_tokens_ends_with_length(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        gen = await client.generate(messages=USER, params={"max_tokens": 7})
        await gen.collect()
    assert gen.end is not None
    assert gen.end["finish_reason"] == "length"
    assert gen.end["usage"]["completion_tokens"] == 7


async def test_stop_string_is_never_sent(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        gen = await client.generate(messages=USER, params={"stop": ["```"]})
        text = await gen.collect()
    assert gen.end is not None and gen.end["finish_reason"] == "stop"
    assert text == SCRIPT[: SCRIPT.index("```")]


async def test_cancel_ends_with_cancelled_and_usage_so_far(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        gen = await client.generate(messages=[{"role": "user", "content": "[[pace_ms=20]]"}],
                                    params={"max_tokens": 500})
        received = 0
        async for _ in gen:
            received += 1
            if received == 3:
                await gen.cancel()
    assert gen.end is not None and gen.end["finish_reason"] == "cancelled"
    assert 3 <= gen.end["usage"]["completion_tokens"] < 20


async def test_ping_pong_echoes_data(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        assert await client.ping({"n": [1, "二"]}) == {"n": [1, "二"]}


async def test_engine_fault_becomes_engine_error_frame(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        bad = await client.generate(messages=[{"role": "user", "content": "[[fail_after=3]]"}])
        good = await client.generate(messages=USER)
        with pytest.raises(ServerError) as info:
            await bad.collect()
        assert info.value.code == "engine_error"
        assert await good.collect() == SCRIPT


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        ("not json", "JSON"),
        ("[1, 2]", "object"),
        ('{"id": "x"}', "type"),
        ('{"type": "launch", "id": "x"}', "launch"),
        ('{"type": "generate", "id": "x"}', "messages"),
        ('{"type": "generate", "messages": [{"role": "user", "content": "a"}]}', "id"),
        ('{"type": "generate", "id": "bad id!", "prompt": "a"}', "id"),
        ('{"type": "generate", "id": "x", "messages": []}', "messages"),
        ('{"type": "generate", "id": "x", "messages": [{"role": "robot", "content": "a"}]}',
         "role"),
        ('{"type": "generate", "id": "x", "prompt": "a", "params": {"temperature": "hot"}}',
         "temperature"),
        ('{"type": "generate", "id": "x", "prompt": "a", "params": {"temperature": 9}}',
         "temperature"),
        ('{"type": "generate", "id": "x", "prompt": "a", "params": {"top_p": 0}}', "top_p"),
        ('{"type": "generate", "id": "x", "prompt": "a", "params": {"max_tokens": 0}}',
         "max_tokens"),
        ('{"type": "generate", "id": "x", "prompt": "a", "params": {"stop": [""]}}', "stop"),
        ('{"type": "generate", "id": "x", "prompt": "a", "params": {"bogus": 1}}', "bogus"),
        ('{"type": "generate", "id": "x", "prompt": "a", "extra": 1}', "extra"),
        ('{"type": "generate", "id": "x", "prompt": "a", "messages": [{"role": "user", '
         '"content": "b"}]}', "messages"),
        ('{"type": "cancel"}', "id"),
        ('{"type": "resume", "stream": "s"}', "after_seq"),
    ],
)
async def test_bad_frames_get_bad_request_naming_the_field(
    fake_server: ServerProcess, frame: str, field: str
) -> None:
    ws = await raw(fake_server)
    await ws.send(frame)
    error = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert error["type"] == "error"
    assert error["code"] == "bad_request"
    assert field in error["message"]
    # the connection still works
    await ws.send(json.dumps({"type": "ping", "data": 1}))
    assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"type": "pong", "data": 1}
    await ws.close()


async def test_bad_input_leaves_a_running_stream_intact(fake_server: ServerProcess) -> None:
    ws = await raw(fake_server)
    await ws.send(json.dumps({"type": "generate", "id": "live", "messages": [
        {"role": "user", "content": "[[pace_ms=5]]"}]}))
    hostile = [b"\x00\xff binary", "{", '{"type": "generate", "id": "live", "prompt": "dup"}',
               '{"type": "cancel", "id": "nope"}', "x" * (1 << 20 + 1), '{"type": 5}']
    for item in hostile:
        await ws.send(item)
    frames = await frames_until(ws, lambda f: f["type"] == "end" and f["id"] == "live", 30)
    await ws.close()
    errors = [f for f in frames if f["type"] == "error"]
    codes = [e["code"] for e in errors]
    assert codes.count("bad_request") == 4
    assert "duplicate_id" in codes and "unknown_id" in codes
    assert all(e["id"] in (None, "live", "nope") for e in errors)
    dup = next(e for e in errors if e["code"] == "duplicate_id")
    assert dup["id"] == "live"
    big = next(e for e in errors if "max_message_bytes" in e["message"])
    assert big["id"] is None
    deltas = [f for f in frames if f["type"] == "delta" and f["id"] == "live"]
    assert "".join(d["text"] for d in deltas) == SCRIPT
    assert frames[-1]["finish_reason"] == "stop"


async def test_too_many_streams_is_refused_and_others_continue(
    fake_server: ServerProcess,
) -> None:
    async with Client(fake_server.ws_url) as client:
        limit = client.hello["limits"]["max_streams_per_connection"]
        slow = [{"role": "user", "content": "[[pace_ms=10]]"}]
        gens = [await client.generate(messages=slow, params={"max_tokens": 20})
                for _ in range(limit)]
        extra = await client.generate(messages=slow)
        with pytest.raises(ServerError) as info:
            await extra.collect()
        assert info.value.code == "too_many_streams"
        done = await asyncio.gather(*(g.collect() for g in gens))
    assert all(done)


async def test_context_overflow_is_refused_not_truncated(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        limit = client.hello["limits"]["context_tokens"]
        gen = await client.generate(prompt="x" * (limit * 3))
        with pytest.raises(ServerError) as info:
            await gen.collect()
    assert info.value.code == "context_overflow"


async def test_max_tokens_above_the_limit_is_context_overflow_as_over_http(
    fake_server: ServerProcess,
) -> None:
    """One verdict on every door: /ws says context_overflow, Chat Completions its OpenAI
    name, context_length_exceeded, both naming max_tokens."""
    ws = await raw(fake_server)
    await ws.send(json.dumps({"type": "generate", "id": "x", "prompt": "a",
                              "params": {"max_tokens": 99999999}}))
    error = json.loads(await asyncio.wait_for(ws.recv(), 10))
    await ws.close()
    assert (error["type"], error["id"], error["code"]) == ("error", "x", "context_overflow")
    assert error["message"].startswith("max_tokens (99999999) exceeds the context")
    async with httpx.AsyncClient() as http:
        r = await http.post(fake_server.url + "/v1/chat/completions",
                            json={"messages": USER, "max_tokens": 99999999})
    assert r.status_code == 400
    assert (r.json()["error"]["code"], r.json()["error"]["param"]) == (
        "context_length_exceeded", "max_tokens")
    assert r.json()["error"]["message"] == error["message"]


async def test_unknown_model_is_refused(fake_server: ServerProcess) -> None:
    async with Client(fake_server.ws_url) as client:
        gen = await client.generate(messages=USER, model="gpt-17")
        with pytest.raises(ServerError) as info:
            await gen.collect()
    assert info.value.code == "unknown_model"


async def test_closing_the_socket_cancels_its_generations(fake_server: ServerProcess) -> None:
    ws = await raw(fake_server)
    await ws.send(json.dumps({"type": "generate", "id": "gone", "messages": [
        {"role": "user", "content": "[[pace_ms=50]]"}], "params": {"max_tokens": 1000}}))
    await frames_until(ws, lambda f: f["type"] == "delta")
    await ws.close()
    # a fresh connection is served at once: nothing of the old one lingers in its way
    async with Client(fake_server.ws_url) as client:
        gen = await client.generate(messages=USER)
        assert await gen.collect() == SCRIPT


async def test_foreign_origin_is_refused(fake_server: ServerProcess) -> None:
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(fake_server.ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                      origin="https://evil.example"):  # type: ignore[arg-type]
            pass
    assert info.value.response.status_code == 403


async def test_plain_mode_speaks_the_articles_protocol(fake_server: ServerProcess) -> None:
    async with websockets.connect(fake_server.ws_url) as ws:
        assert ws.subprotocol is None
        for turn in ("[[echo]] first", "[[echo]] second"):
            await ws.send(turn)
            pieces = []
            while (frame := await asyncio.wait_for(ws.recv(), 10)) != "<|ENDTEXT|>":
                pieces.append(frame)
            assert "".join(pieces) == turn.removeprefix("[[echo]] ")
