"""tokenpipe.v1 and the plain mode against a real server on the real bundled model."""

from __future__ import annotations

import asyncio
import json
import re
import unicodedata

import httpx
import pytest
import websockets

from tests.conftest import ServerProcess, running
from tokenpipe.client import Client, ServerError

pytestmark = [pytest.mark.e2e, pytest.mark.model]

CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


async def test_japanese_streams_without_garbling(model_server: ServerProcess) -> None:
    async with Client(model_server.ws_url) as client:
        gen = await client.generate(messages=[
            {"role": "system", "content": "あなたは日本語で答えるアシスタントです。"},
            {"role": "user", "content": "日本の首都は？"}], params={"max_tokens": 40})
        text = await gen.collect()
    assert gen.end is not None
    assert len(gen.deltas) >= 5  # it streamed, piece by piece
    assert len(CJK.findall(text)) >= 5  # the model answers in Japanese
    for delta in gen.deltas:
        assert delta["text"]
        assert "\ufffd" not in delta["text"]
        # no delta starts with a combining mark or a lone half of a pair: whole characters
        assert unicodedata.category(delta["text"][0]) not in ("Mn", "Cs")
    assert gen.end["usage"]["completion_tokens"] == 40


async def test_greedy_answer_is_the_same_every_time_and_code_survives(
    model_server: ServerProcess,
) -> None:
    messages = [{"role": "system", "content": "You are a Python expert."},
                {"role": "user", "content": "Write a Python function that reverses a string."}]
    async with Client(model_server.ws_url) as client:
        first = await client.generate(messages=messages, params={"max_tokens": 60})
        second = await client.generate(messages=messages, params={"max_tokens": 60})
        a, b = await asyncio.gather(first.collect(), second.collect())
    assert a == b
    assert "def " in a
    assert [d["seq"] for d in first.deltas] == list(range(len(first.deltas)))


async def test_multi_turn_chat_uses_the_history(model_server: ServerProcess) -> None:
    async with Client(model_server.ws_url) as client:
        turn1 = [{"role": "user", "content": "My name is Ada. Remember it."}]
        gen = await client.generate(messages=turn1, params={"max_tokens": 30})
        reply = await gen.collect()
        turn2 = [*turn1, {"role": "assistant", "content": reply},
                 {"role": "user", "content": "What is my name?"}]
        gen2 = await client.generate(messages=turn2, params={"max_tokens": 30})
        await gen2.collect()
    assert gen2.start is not None and gen.start is not None
    assert gen2.start["prompt_tokens"] > gen.start["prompt_tokens"] + 5


async def test_stop_string_ends_the_answer_without_sending_it(
    model_server: ServerProcess,
) -> None:
    async with Client(model_server.ws_url) as client:
        free = await client.generate(prompt="1, 2, 3, 4, 5,", params={"max_tokens": 20})
        full = await free.collect()
        stopped = await client.generate(prompt="1, 2, 3, 4, 5,", params={
            "max_tokens": 20, "stop": [" 8"]})
        cut = await stopped.collect()
    assert " 8" in full
    assert cut == full[: full.index(" 8")]
    assert stopped.end is not None and stopped.end["finish_reason"] == "stop"


async def test_cancel_frees_the_engine_at_once(live_server: object) -> None:
    """With one sequence slot, a cancelled generation must give its slot back at once:
    the next request is admitted straight away (no `queued` frame) and the cancelled one
    stopped computing within a step of the cancel (its usage barely exceeds what arrived)."""
    url = live_server("--parallel", "1")  # type: ignore[operator]
    ws_url = url.replace("http", "ws") + "/ws"
    async with Client(ws_url) as client:
        long = await client.generate(prompt="Once upon a time", params={"max_tokens": 900})
        received = 0
        async for _ in long:
            received += 1
            if received == 5:
                await long.cancel()
        assert long.end is not None and long.end["finish_reason"] == "cancelled"
        assert long.end["usage"]["completion_tokens"] <= received + 3
        nxt = await client.generate(prompt="Hello", params={"max_tokens": 5})
        await nxt.collect()
    assert nxt.queued == []
    assert nxt.end is not None and nxt.end["usage"]["completion_tokens"] >= 1


async def test_closed_socket_frees_the_engine(live_server: object) -> None:
    url = live_server("--parallel", "1")  # type: ignore[operator]
    ws_url = url.replace("http", "ws") + "/ws"
    ws = await websockets.connect(ws_url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
    await ws.recv()
    await ws.send(json.dumps({"type": "generate", "id": "x", "prompt": "Once upon a time",
                              "params": {"max_tokens": 900}}))
    while json.loads(await ws.recv())["type"] != "delta":
        pass
    await ws.close()
    async with Client(ws_url) as client:
        gen = await client.generate(prompt="Hello", params={"max_tokens": 5})
        await gen.collect()
    assert gen.queued == []  # the abandoned generation no longer holds the only slot


async def test_plain_mode_answers_with_the_model(model_server: ServerProcess) -> None:
    async with websockets.connect(model_server.ws_url) as ws:
        await ws.send("What is 2 + 2?")
        pieces = []
        while (frame := await asyncio.wait_for(ws.recv(), 60)) != "<|ENDTEXT|>":
            pieces.append(frame)
    assert len(pieces) > 3
    assert "".join(pieces).strip()


async def test_one_conversation_is_offered_the_whole_context() -> None:
    """The defaults (--parallel 4, no --ctx-size): the tiered KV cache of twice the model's
    trained 8192, a shared half one conversation may fill; hello, /v1/models and the
    refusal all state 8192 tokens a conversation, not a split stream's 8192 / 4."""
    with running(ServerProcess(("--parallel", "4"))) as server:
        await _whole_context(server)


async def _whole_context(model_server: ServerProcess) -> None:
    async with Client(model_server.ws_url) as client:
        assert client.hello["limits"]["context_tokens"] == 8192
        assert client.hello["limits"]["max_tokens"] == 8191
        gen = await client.generate(prompt="Tell me a story about the sea and the sky.",
                                    params={"max_tokens": 8190})
        with pytest.raises(ServerError) as info:  # ~11 prompt tokens + 8190 > 8192
            await gen.collect()
    assert info.value.code == "context_overflow" and "8192" in info.value.message
    async with httpx.AsyncClient() as http:
        models = (await http.get(model_server.url + "/v1/models")).json()["data"]
    assert [m["max_model_len"] for m in models] == [8192]
