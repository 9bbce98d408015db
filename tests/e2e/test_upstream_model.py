"""The openai engine on real models: a tokenpipe upstream on the bundled SmolLM2 (llama.cpp),
and llama.cpp's own llama-server (built by `scripts/setup.sh --test`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import THREADS, ServerProcess, running
from tests.e2e.llama_server import LlamaServer
from tests.e2e.test_upstream import eventually
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
CODE = [{"role": "system", "content": "You are a Python expert."},
        {"role": "user", "content": "Write a Python function that reverses a string."}]


def counts(usage: dict[str, Any]) -> tuple[int, int]:
    """Prompt and completion tokens; the cache's share depends on what ran before."""
    return usage["prompt_tokens"], usage["completion_tokens"]


def _needs_llama_cpp() -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")


@pytest.fixture(scope="module")
def model_upstream() -> Iterator[ServerProcess]:
    """One sequence at a time, so a generation left running upstream would be visible."""
    _needs_llama_cpp()
    with running(ServerProcess(("--parallel", "1", "--ctx-size", "4096", "--threads", str(THREADS)))
                 ) as server:
        yield server


@pytest.fixture(scope="module")
def model_proxy(model_upstream: ServerProcess) -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "openai", "--upstream", model_upstream.url,
                                "--parallel", "1"))) as server:
        yield server


def metric(server: ServerProcess, name: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    # summed over its labels (the `api`)
    return sum(map(float, re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text,
                                     re.MULTILINE)))


async def test_greedy_text_through_the_proxy_equals_the_upstreams(
    model_upstream: ServerProcess, model_proxy: ServerProcess
) -> None:
    params = {"max_tokens": 60, "temperature": 0}
    async with Client(model_upstream.ws_url) as direct_client:
        direct = await direct_client.generate(CODE, params=params)
        expected = await direct.collect()
    async with Client(model_proxy.ws_url) as proxy_client:
        via = await proxy_client.generate(CODE, params=params)
        got = await via.collect()
    assert got == expected and "def " in got
    assert via.start is not None and via.start["prompt_tokens"] is None
    assert direct.start is not None and direct.end is not None and via.end is not None
    assert counts(via.end["usage"]) == counts(direct.end["usage"])
    assert via.end["usage"]["prompt_tokens"] == direct.start["prompt_tokens"]
    assert via.end["finish_reason"] == direct.end["finish_reason"]
    async with httpx.AsyncClient(timeout=120) as http:
        body = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}
        a = (await http.post(model_upstream.url + "/v1/completions", json=body)).json()
        b = (await http.post(model_proxy.url + "/v1/completions", json=body)).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert counts(a["usage"]) == counts(b["usage"])


async def test_cancel_through_the_proxy_stops_the_upstream_generation(
    model_upstream: ServerProcess, model_proxy: ServerProcess
) -> None:
    cancelled = "tokenpipe_cancellations_total"
    tokens = "tokenpipe_tokens_generated_total"
    before_cancelled, before_tokens = metric(model_upstream, cancelled), metric(
        model_upstream, tokens)
    async with Client(model_proxy.ws_url) as client:
        gen = await client.generate(STORY, params={"max_tokens": 1000, "temperature": 0})
        async for _ in gen:
            if len(gen.deltas) >= 3:
                break
        await gen.cancel()
        await gen.collect()
    assert gen.end is not None and gen.end["finish_reason"] == "cancelled"
    # The upstream's own generation ended cancelled, long before its 1000 tokens.
    await eventually(lambda: metric(model_upstream, cancelled) == before_cancelled + 1,
                     "the upstream cancelled its generation", within_s=60)
    assert metric(model_upstream, tokens) - before_tokens < 1000
    # Its only slot is free again: a direct request starts without waiting in its queue.
    async with Client(model_upstream.ws_url) as direct_client:
        direct = await direct_client.generate(STORY, params={"max_tokens": 8})
        assert await direct.collect()
    assert direct.queued == []


# ---- llama.cpp's llama-server -----------------------------------------------------------


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaServer]:
    """Built by `scripts/setup.sh --test` (a missing binary fails: see LlamaServer)."""
    _needs_llama_cpp()
    server = LlamaServer(ctx_size=8192, parallel=8)
    with running(server):
        yield server


def slots_busy(server: LlamaServer) -> list[int]:
    """Ids of llama-server's slots that are generating (its GET /slots)."""
    slots = httpx.get(server.url + "/slots", timeout=5).json()
    return [s["id"] for s in slots if s.get("is_processing")]


async def test_proxy_in_front_of_llama_server(llama_server: LlamaServer) -> None:
    upstream = llama_server.url
    proxy = ServerProcess(("--engine", "openai", "--upstream", upstream))
    try:
        proxy.wait_ready()
        async with httpx.AsyncClient(timeout=120) as http:
            direct = (await http.post(upstream + "/v1/chat/completions", json={
                "messages": CODE, "max_tokens": 60, "temperature": 0})).json()
        async with Client(proxy.ws_url) as client:
            gens = [await client.generate(CODE, params={"max_tokens": 60, "temperature": 0})
                    for _ in range(3)]
            texts = [await g.collect() for g in gens]
        assert texts == [direct["choices"][0]["message"]["content"]] * 3
        end = gens[0].end
        assert end is not None and counts(end["usage"]) == counts(direct["usage"])
        async with Client(proxy.ws_url) as client:
            gen = await client.generate(STORY, params={"max_tokens": 1000})
            async for _ in gen:
                if len(gen.deltas) >= 3:
                    break
            assert slots_busy(llama_server), "the upstream is generating the story"
            await gen.cancel()
            await gen.collect()
        assert gen.end is not None and gen.end["finish_reason"] == "cancelled"
        # On llama-server's side: its slot stops long before the 1000 tokens.
        await eventually(lambda: not slots_busy(llama_server),
                         "llama-server freed the slot", within_s=10)
    finally:
        proxy.stop()
