"""A model table's sampling defaults on the real bundled model, through the OpenAI door,
tokenpipe.v1 and the plain mode: `cold` (temperature 0, a stop string), `hot` (temperature
1.5 with a seed) and `tuned` (every other key) answer by their tables where a request leaves
a field out, and a request that sets its own value has it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ServerProcess, running
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

STOP = "sea"
CONFIG = f"""ctx_size = 2048
parallel = 1

[models.cold]
source = "smollm2"
temperature = 0
stop = ["{STOP}"]

[models.hot]
source = "smollm2"
temperature = 1.5
seed = 11

[models.tuned]
source = "smollm2"
temperature = 1.0
seed = 3
top_p = 0.9
top_k = 20
min_p = 0.02
repetition_penalty = 1.3
presence_penalty = 0.5
frequency_penalty = 0.5
"""
TUNED = {"top_p": 0.9, "top_k": 20, "min_p": 0.02, "repetition_penalty": 1.3,
         "presence_penalty": 0.5, "frequency_penalty": 0.5}
ASK = "Write one sentence about the sea."
MESSAGES = [{"role": "user", "content": ASK}]
N = 24


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = tmp_path_factory.mktemp("config") / "tokenpipe.toml"
    config.write_text(CONFIG)
    with running(ServerProcess(("--config", str(config)))) as proc:
        yield proc


async def chat(client: httpx.AsyncClient, model: str, **params: Any) -> tuple[str, str]:
    r = await client.post("/v1/chat/completions", json={
        "model": model, "messages": MESSAGES, "max_tokens": N, **params})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["message"]["content"], choice["finish_reason"]


async def streamed(client: httpx.AsyncClient, model: str, **params: Any) -> str:
    body = {"model": model, "messages": MESSAGES, "max_tokens": N, "stream": True, **params}
    text = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)


async def test_the_openai_door_answers_by_the_table_unless_the_request_says(
        server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        # the reference answers: explicit values on the other model
        greedy, reason = await chat(client, "hot", temperature=0)
        assert reason == "length" and STOP in greedy
        seeded, _ = await chat(client, "cold", temperature=1.5, seed=11, stop=[])
        assert seeded != greedy  # 1.5 is not greedy: the comparisons below can tell
        # cold's table: greedy (OpenAI's default would be 1) and its stop string
        assert await chat(client, "cold") == (greedy.split(STOP)[0], "stop")
        assert await streamed(client, "cold") == greedy.split(STOP)[0]
        assert await chat(client, "cold", stop=["QQ"]) == (greedy, "length")
        # hot's table: temperature 1.5 with its seed
        assert await chat(client, "hot") == (seeded, "length")
        assert await streamed(client, "hot") == seeded
        assert (await chat(client, "hot", seed=12))[0] != seeded
        # tuned's table: every other sampling key, as if the request had given them
        plain, _ = await chat(client, "hot", temperature=1.0, seed=3)
        tuned, _ = await chat(client, "hot", temperature=1.0, seed=3, **TUNED)
        assert tuned != plain
        assert (await chat(client, "tuned"))[0] == tuned
        assert (await chat(client, "tuned", top_k=0, top_p=1, min_p=0, repetition_penalty=1,
                           presence_penalty=0, frequency_penalty=0))[0] == plain


async def test_tokenpipe_v1_and_the_plain_mode_answer_by_the_table(
        server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
        greedy, _ = await chat(http, "hot", temperature=0)
        seeded, _ = await chat(http, "cold", temperature=1.5, seed=11, stop=[])
    async with Client(server.ws_url) as client:
        async def answer(model: str, **params: Any) -> tuple[str, str]:
            gen = await client.generate(messages=MESSAGES, model=model,
                                        params={"max_tokens": N, **params})
            text = await gen.collect()
            assert gen.end is not None
            return text, gen.end["finish_reason"]

        assert await answer("cold") == (greedy.split(STOP)[0], "stop")
        assert await answer("cold", stop=[]) == (greedy, "length")
        assert await answer("hot") == (seeded, "length")  # tokenpipe.v1's default is 0
        assert await answer("hot", temperature=0) == (greedy, "length")
    # the plain mode gives no parameters: the first model's table, all of it
    async with websockets.connect(server.ws_url) as ws:
        await ws.send(ASK)
        pieces = []
        while (frame := await asyncio.wait_for(ws.recv(), 60)) != "<|ENDTEXT|>":
            pieces.append(frame)
    assert "".join(str(p) for p in pieces) == greedy.split(STOP)[0]

