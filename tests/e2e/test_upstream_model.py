"""The openai engine on real models: a tokenpipe upstream on the bundled SmolLM2 (llama.cpp),
and llama.cpp's own llama-server where it has been built."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LOGS, ServerProcess, free_port
from tests.e2e.test_upstream import eventually
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

LLAMA_SERVER = Path(os.environ.get(
    "LLAMA_SERVER", "/work/ref/llama_cpp_python-0.3.36/build/bin/llama-server"))
STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
CODE = [{"role": "system", "content": "You are a Python expert."},
        {"role": "user", "content": "Write a Python function that reverses a string."}]


def _needs_llama_cpp() -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")


@pytest.fixture(scope="module")
def model_upstream() -> Iterator[ServerProcess]:
    """One sequence at a time, so a generation left running upstream would be visible."""
    _needs_llama_cpp()
    server = ServerProcess(("--parallel", "1", "--ctx-size", "4096", "--threads", "2"))
    server.wait_ready()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def model_proxy(model_upstream: ServerProcess) -> Iterator[ServerProcess]:
    server = ServerProcess(("--engine", "openai", "--upstream", model_upstream.url,
                            "--parallel", "1"))
    server.wait_ready()
    yield server
    server.stop()


def metric(server: ServerProcess, name: str) -> float:
    text = httpx.get(server.url + "/metrics").text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


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
    assert via.end["usage"] == direct.end["usage"]
    assert via.end["usage"]["prompt_tokens"] == direct.start["prompt_tokens"]
    assert via.end["finish_reason"] == direct.end["finish_reason"]
    async with httpx.AsyncClient(timeout=120) as http:
        body = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}
        a = (await http.post(model_upstream.url + "/v1/completions", json=body)).json()
        b = (await http.post(model_proxy.url + "/v1/completions", json=body)).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert a["usage"] == b["usage"]


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
def llama_server() -> Iterator[str]:
    _needs_llama_cpp()
    from tokenpipe.engines.llamacpp import default_model_path

    port = free_port()
    LOGS.mkdir(parents=True, exist_ok=True)
    with (LOGS / f"llama-server-{port}.log").open("wb") as log:
        proc = subprocess.Popen([str(LLAMA_SERVER), "-m", str(default_model_path()), "-t", "2",
                                 "-c", "8192", "-np", "8", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, "llama-server exited; see its log in artifacts/"
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                assert time.monotonic() < deadline, "llama-server did not become ready"
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.skipif(not LLAMA_SERVER.is_file(), reason=(
    "llama.cpp's llama-server is not built here (a 5-minute build CI does not do); "
    "set LLAMA_SERVER to its path to run this"))
async def test_proxy_in_front_of_llama_server(llama_server: str) -> None:
    proxy = ServerProcess(("--engine", "openai", "--upstream", llama_server))
    try:
        proxy.wait_ready()
        async with httpx.AsyncClient(timeout=120) as http:
            direct = (await http.post(llama_server + "/v1/chat/completions", json={
                "messages": CODE, "max_tokens": 60, "temperature": 0})).json()
        async with Client(proxy.ws_url) as client:
            gens = [await client.generate(CODE, params={"max_tokens": 60, "temperature": 0})
                    for _ in range(3)]
            texts = [await g.collect() for g in gens]
        assert texts == [direct["choices"][0]["message"]["content"]] * 3
        end = gens[0].end
        assert end is not None and end["usage"] == {
            "prompt_tokens": direct["usage"]["prompt_tokens"],
            "completion_tokens": direct["usage"]["completion_tokens"]}
        async with Client(proxy.ws_url) as client:
            gen = await client.generate(STORY, params={"max_tokens": 1000})
            async for _ in gen:
                if len(gen.deltas) >= 3:
                    break
            await gen.cancel()
            await gen.collect()
        assert gen.end is not None and gen.end["finish_reason"] == "cancelled"
    finally:
        proxy.stop()
