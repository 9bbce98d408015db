"""Model loads beside a running stream (issue 31 item 5): the bundled model loaded on demand
again and again (its keep-alive unloads it) while a bystander streams from the fake model
in the same server. Each load used to build the grammar library's view of the vocabulary,
~100 ms holding the GIL, a stall of every stream; it is now built by the first request
with an output format, once per model file (constrain/vocabularies.py), and formats still
work after a reload. The figures (printed with -s) are in docs/security.md."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ServerProcess, running
from tests.e2e.hostile import Bystander

pytestmark = [pytest.mark.e2e, pytest.mark.model]

ASK = [{"role": "user", "content": "Pick a colour."}]
COLOUR = {"type": "json_schema", "json_schema": {"name": "c", "schema": {
    "type": "object", "properties": {"colour": {"enum": ["red", "green"]}},
    "required": ["colour"]}}}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running(ServerProcess((
            "--model", "fake=fake:script", "--model", "small=smollm2", "--load-on-demand",
            "--keep-alive", "1s", "--parallel", "2", "--ctx-size", "2048"))) as s:
        yield s


async def unloaded(http: httpx.AsyncClient, model: str) -> None:
    deadline = time.monotonic() + 60
    while (await http.get("/health")).json()["states"][model] != "available":
        assert time.monotonic() < deadline, "the keep-alive never unloaded it"
        await asyncio.sleep(0.1)


async def test_loads_beside_a_stream(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
        async with Bystander(server.ws_url, tokens=300) as alone:
            pass
        alone.check()
        gaps = []
        for i in range(4):
            await unloaded(http, "small")
            async with Bystander(server.ws_url, tokens=300) as bystander:
                started = time.perf_counter()
                body = {"model": "small", "messages": ASK, "max_tokens": 20}
                if i % 2:  # every other load: a format, after a reload too
                    body |= {"response_format": COLOUR, "temperature": 0}
                r = await http.post("/v1/chat/completions", json=body)
                took = time.perf_counter() - started
            bystander.check()
            assert r.status_code == 200, r.text
            if i % 2:
                answer = json.loads(r.json()["choices"][0]["message"]["content"])
                assert answer["colour"] in ("red", "green")
            gaps.append(bystander.worst_stall_s)
            print(f"load {i} ({'format' if i % 2 else 'plain'}): answered in {took:.2f} s, "
                  f"bystander worst gap {1000 * bystander.worst_stall_s:.0f} ms")
    print(f"bystander alone {1000 * alone.worst_stall_s:.0f} ms; beside loads "
          f"{', '.join(f'{1000 * g:.0f}' for g in gaps)} ms")
