"""Load on demand on the real bundled model, twice under two names, in one real server:
the first request loads its model (and hears so), --max-loaded-models 1 unloads the least
recently used idle one, never one that is generating, the keep-alive frees the memory
(the server's RSS drops), and a model that cannot load fails alone."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ServerProcess, broken_model, running
from tokenpipe.client import Client, ServerError
from tokenpipe.server.model_slots import LOAD_RETRY_S

pytestmark = [pytest.mark.e2e, pytest.mark.model]

USER = [{"role": "user", "content": "Name three colours."}]
STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def states(server: ServerProcess) -> dict[str, str]:
    body: dict[str, str] = httpx.get(server.url + "/health", timeout=5).json()["states"]
    return body


async def wait_states(server: ServerProcess, want: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while (now := await asyncio.to_thread(states, server)) != want:
        assert time.monotonic() < deadline, now
        await asyncio.sleep(0.1)


async def answer(client: Client, model: str, max_tokens: int = 8) -> tuple[bool, str]:
    """(whether it waited for its model to load, the text) of a greedy answer."""
    gen = await client.generate(USER, model=model, params={"max_tokens": max_tokens})
    text = await gen.collect()
    return gen.loaded_model, text


@pytest.fixture(scope="module")
def server() -> Any:
    with running(ServerProcess((
            "--model", "small=smollm2", "--model", "twin=smollm2",
            "--model", f"bad={broken_model()}", "--load-on-demand", "--max-loaded-models", "1",
            "--keep-alive", "3s", "--parallel", "2", "--ctx-size", "2048"))) as s:
        yield s


async def test_nothing_loads_at_start_and_hello_says_each_models_state(server: Any) -> None:
    assert states(server) == {"small": "available", "twin": "available", "bad": "available"}
    async with Client(server.ws_url) as client:
        assert client.hello["models"] == ["small", "twin", "bad"]
        assert client.hello["model_states"]["small"] == "available"
    listed = (await asyncio.to_thread(httpx.get, server.url + "/v1/models")).json()["data"]
    assert [(m["id"], m["state"]) for m in listed] == [
        ("small", "available"), ("twin", "available"), ("bad", "available")]


async def test_first_request_loads_then_lru_eviction_then_keep_alive_frees(server: Any) -> None:
    await wait_states(server, {"small": "available", "twin": "available", "bad": "available"})
    idle_rss = rss_mb(server.proc.pid)
    async with Client(server.ws_url) as client:
        loaded, text = await answer(client, "small")
        assert loaded and text.strip()
        loaded_rss = rss_mb(server.proc.pid)
        assert states(server)["small"] == "loaded"
        loaded, again = await answer(client, "small")  # loaded: straight to the answer
        assert not loaded and again == text
        # the other name: small is idle, so it goes to make room (--max-loaded-models 1)
        loaded, twin_text = await answer(client, "twin")
        assert loaded and twin_text == text  # the same weights
        assert states(server) == {"small": "available", "twin": "loaded", "bad": "available"}
    # the keep-alive (3 s idle) frees it, and the memory goes back
    await wait_states(server, {"small": "available", "twin": "available", "bad": "available"})
    freed_rss = rss_mb(server.proc.pid)
    print(f"RSS MB: idle {idle_rss:.0f}, loaded {loaded_rss:.0f}, after unload {freed_rss:.0f}")
    assert loaded_rss - idle_rss > 60  # the 98 MB GGUF's weights and the KV cache
    assert freed_rss < loaded_rss - 50


async def test_a_generating_model_is_never_evicted(server: Any) -> None:
    async with Client(server.ws_url) as client:
        await answer(client, "twin")  # twin loaded
        # a story: "Name three colours." ended within the 0.3 s below once (then twin was
        # idle, and rightly made room)
        long = await client.generate(STORY, model="twin", params={"max_tokens": 120})
        await aiter(long).__anext__()  # its first text: it is generating
        other = await client.generate(USER, model="small", params={"max_tokens": 8})
        await asyncio.sleep(0.3)
        assert states(server)["twin"] == "loaded" and states(server)["small"] == "loading"
        _, small_text = await asyncio.gather(long.collect(), other.collect())
        assert long.end is not None and long.end["usage"]["completion_tokens"] > 8
        assert small_text.strip()
        assert states(server)["small"] == "loaded" and states(server)["twin"] == "available"


async def test_a_model_that_cannot_load_fails_alone(server: Any) -> None:
    async with Client(server.ws_url) as client:
        bad = await client.generate(USER, model="bad")
        good = await client.generate(USER, model="small", params={"max_tokens": 8})
        with pytest.raises(ServerError) as info:
            await bad.collect()
        assert info.value.code == "engine_error" and "broken-model.gguf" in info.value.message
        assert (await good.collect()).strip()
    assert states(server)["bad"] == "failed"
    # /health: 200 while the others serve, degraded, and says which model cannot and why
    r = await asyncio.to_thread(httpx.get, server.url + "/health")
    health = r.json()
    assert r.status_code == 200 and health["status"] == "degraded"
    assert list(health["errors"]) == ["bad"] and "broken-model.gguf" in health["errors"]["bad"]
    # the OpenAI door: at once, in its own shape, while the failure is recent
    r = await asyncio.to_thread(httpx.post, server.url + "/v1/chat/completions",
                                json={"model": "bad", "messages": USER}, timeout=30)
    assert r.status_code == 503 and "broken-model.gguf" in r.json()["error"]["message"]
    r = await asyncio.to_thread(httpx.post, server.url + "/v1/chat/completions", timeout=60,
                                json={"model": "small", "messages": USER, "max_tokens": 4})
    assert r.status_code == 200


async def test_a_failed_load_never_costs_a_good_model(server: Any) -> None:
    """--max-loaded-models 1: the load of bad unloads small to make room, fails, and small
    loads again; bad's retry (after LOAD_RETRY_S) unloads nothing, it fails at once."""
    async with Client(server.ws_url) as client:
        await answer(client, "small")
        await wait_states(server, {"small": "loaded", "twin": "available", "bad": "failed"})
        retry_at = time.monotonic() + LOAD_RETRY_S  # then bad may be tried again
        while time.monotonic() < retry_at:  # small stays used: its 3 s keep-alive never ends
            await answer(client, "small", max_tokens=1)
            await asyncio.sleep(0.5)
        r = await asyncio.to_thread(httpx.post, server.url + "/v1/chat/completions",
                                    json={"model": "bad", "messages": USER}, timeout=30)
        assert r.status_code == 503
        assert "would unload a loaded model" in r.json()["error"]["message"]
        assert states(server)["small"] == "loaded"  # never left
        loaded, text = await answer(client, "small")
        assert not loaded and text.strip()


def test_a_failed_load_gives_back_the_model_it_evicted() -> None:
    with running(ServerProcess((
            "--model", "small=smollm2", "--model", f"bad={broken_model()}",
            "--load-on-demand", "--max-loaded-models", "1", "--ctx-size", "2048"))) as s:
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                       json={"model": "small", "messages": USER, "max_tokens": 4})
        assert r.status_code == 200 and states(s)["small"] == "loaded"
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                       json={"model": "bad", "messages": USER, "max_tokens": 4})
        assert r.status_code == 503 and "broken-model.gguf" in r.json()["error"]["message"]
        asyncio.run(wait_states(s, {"small": "loaded", "bad": "failed"}))  # loaded again
        assert "loading small again: the load of bad it made room for failed" in (
            s.log_path.read_text())


@pytest.fixture(scope="module")
def two() -> Any:
    with running(ServerProcess(("--model", "small=smollm2", "--model", "twin=smollm2",
                                "--load-on-demand", "--parallel", "2", "--ctx-size", "2048"))
                 ) as s:
        yield s


def test_an_sse_request_hears_the_load_as_a_comment(two: Any) -> None:
    with httpx.stream("POST", two.url + "/v1/chat/completions", timeout=60,
                      json={"model": "small", "messages": USER, "max_tokens": 4,
                            "stream": True}) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert lines[0] == ": loading model"
    assert any(line.startswith("data: {") for line in lines) and lines[-1] == "data: [DONE]"
    assert states(two)["small"] == "loaded"


async def test_a_load_does_not_stall_another_models_stream(two: Any) -> None:
    """While twin loads (in a worker thread), small's stream goes on: its deltas keep
    arriving between twin's `loading` frame and twin's start (frames of one socket come in
    order; a load that held the event loop would leave at most one merged delta there)."""
    async with websockets.connect(two.ws_url, subprotocols=["tokenpipe.v1"]) as ws:  # type: ignore[list-item]
        json.loads(await ws.recv())  # hello
        # an answer that outlasts twin's load (a short one ended before it on a busy machine)
        story = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
        await ws.send(json.dumps({"type": "generate", "id": "a", "model": "small",
                                  "messages": story, "params": {"max_tokens": 400}}))
        while (f := json.loads(await ws.recv()))["type"] != "delta":
            pass
        await ws.send(json.dumps({"type": "generate", "id": "b", "model": "twin",
                                  "messages": USER, "params": {"max_tokens": 4}}))
        during, loading = 0, False
        while True:
            f = json.loads(await ws.recv())
            if f["id"] == "b" and f["type"] == "queued":
                loading = f.get("loading") is True
            elif f["id"] == "b" and f["type"] in ("start", "error"):
                break
            elif f["id"] == "a" and f["type"] == "delta" and loading:
                during += 1
            assert not (f["id"] == "a" and f["type"] in ("end", "error")), f
        assert f["type"] == "start" and loading
        print(f"small's deltas during twin's load: {during}")
        assert during >= 3
