"""docs/deployment.md's nginx configuration, run as written: nginx in front of two tokenpipe
replicas (openai engine) in front of one tokenpipe upstream on the fake engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ServerProcess, drop_and_resume, running
from tests.e2e.nginx import Nginx
from tokenpipe.client import Client
from tokenpipe.engines.fake import SCRIPT

pytestmark = pytest.mark.e2e

@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, Any]]:
    with running(ServerProcess(("--engine", "fake"))) as upstream:
        replicas = [ServerProcess(("--engine", "openai", "--upstream", upstream.url,
                                   "--model-id", f"chat-{i}")) for i in range(2)]
        with running(replicas[0]), running(replicas[1]), running(
                Nginx([r.port for r in replicas])) as nginx:
            yield {"url": nginx.url, "ws": nginx.ws_url}


async def test_websocket_and_events_stream_through_nginx(stack: dict[str, Any]) -> None:
    async with Client(stack["ws"]) as client:
        gen = await client.generate(
            [{"role": "user", "content": "[[echo]][[pace_ms=20]] ünï 🎉 via nginx"}])
        assert await gen.collect() == "ünï 🎉 via nginx"
    assert len(gen.deltas) > 3
    reads = 0
    body = {"messages": [{"role": "user", "content": "[[pace_ms=20]][[tokens=30]]"}],
            "stream": True, "max_tokens": 30}
    async with httpx.AsyncClient(base_url=stack["url"]) as http, http.stream(
            "POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        text = b""
        async for raw in response.aiter_raw():
            reads += raw.count(b'"content":"') > 0
            text += raw
    assert text.endswith(b"data: [DONE]\n\n")
    assert reads > 5  # the events came as they were made, not in one buffered piece


async def test_resume_reaches_the_same_replica_through_nginx(stack: dict[str, Any]) -> None:
    _, resumed, text = await drop_and_resume(stack["ws"])  # both through the balancer
    assert SCRIPT.startswith(text)
    assert resumed.end is not None and resumed.end["usage"]["completion_tokens"] == 40


async def test_the_route_cookie_pins_a_client_to_one_replica(stack: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=stack["url"]) as http:
        first = await http.get("/v1/models")
        cookie = first.headers.get("set-cookie", "")
        assert cookie.startswith("tokenpipe_route=")
        route = cookie.split(";")[0].split("=", 1)[1]

        async def model_for(value: str) -> str:
            response = await http.get("/v1/models",
                                      headers={"Cookie": f"tokenpipe_route={value}"})
            assert "set-cookie" not in response.headers  # it has one: no new one
            return str(response.json()["data"][0]["id"])

        pinned = {await model_for(route) for _ in range(10)}
        spread = {await model_for(f"client-{i}") for i in range(30)}
    assert len(pinned) == 1
    assert spread == {"chat-0", "chat-1"}
    async with websockets.connect(stack["ws"], subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                  additional_headers={"Cookie": f"tokenpipe_route={route}"}
                                  ) as ws:
        hello = json.loads(await ws.recv())
    assert hello["models"] == sorted(pinned)
