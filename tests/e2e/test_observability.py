"""/health, /metrics, JSON logs with request ids, and the API key kept out of logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ServerProcess, broken_model
from tokenpipe.client import Client, ServerError, bearer_subprotocol

pytestmark = pytest.mark.e2e


def metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name + (("{" + labels + "}") if labels else "")) + r" ([0-9.e+-]+)"
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


async def test_metrics_count_generations_tokens_errors_and_connections(
    live_server: Any,
) -> None:
    url = live_server("--engine", "fake")
    async with Client(url.replace("http", "ws") + "/ws") as client:
        gen = await client.generate(prompt="[[tokens=12]]")
        await gen.collect()
        cancelled = await client.generate(prompt="[[pace_ms=20]]")
        async for _ in cancelled:
            await cancelled.cancel()
        await client.send_raw("not json")
        await client.errors.get()
        text = (await asyncio.to_thread(httpx.get, url + "/metrics")).text
        assert metric(text, "tokenpipe_connections", 'protocol="tokenpipe.v1"') == 1
    ws = 'api="ws"'  # the door, on every request metric (labels come sorted by name)
    assert metric(text, "tokenpipe_tokens_generated_total", ws) >= 12
    assert metric(text, "tokenpipe_generations_finished_total",
                  ws + ',finish_reason="stop"') == 1
    assert metric(text, "tokenpipe_cancellations_total", ws) == 1
    assert metric(text, "tokenpipe_errors_total", ws + ',code="bad_request"') == 1
    assert metric(text, "tokenpipe_time_to_first_token_seconds_count", ws) == 2
    assert metric(text, "tokenpipe_inter_token_latency_seconds_count", ws) > 5
    assert 'tokenpipe_generations_active{model="fake"} 0.0' in text


def test_health_is_public_and_ready(fake_server: ServerProcess) -> None:
    response = httpx.get(fake_server.url + "/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "models": ["fake"], "states": {"fake": "loaded"}}


async def test_a_model_that_cannot_load_fails_health_and_requests_clearly() -> None:
    server = ServerProcess(("--model", broken_model()))
    try:
        deadline = time.monotonic() + 60
        body: dict[str, Any] = {}
        while body.get("status") != "error" and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                response = await asyncio.to_thread(httpx.get, server.url + "/health", timeout=2)
                body = response.json()
            await asyncio.sleep(0.2)
        assert response.status_code == 503
        assert "broken-model.gguf" in body["error"]
        async with Client(server.ws_url) as client:
            gen = await client.generate(prompt="hi")
            with pytest.raises(ServerError) as info:
                await gen.collect()
        assert info.value.code == "engine_error"
        assert "broken-model.gguf" in info.value.message
    finally:
        server.stop()


async def test_json_logs_carry_request_ids_and_never_the_key() -> None:
    key = "sk-very-secret-key-123"
    server = ServerProcess(("--engine", "fake", "--log-format", "json", "--api-key", key))
    server.wait_ready()
    try:
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"]):  # type: ignore[list-item]
                pass
        assert refused.value.response.status_code == 401
        async with Client(server.ws_url, api_key=key) as client:
            gen = await client.generate(prompt="[[tokens=3]]")
            await gen.collect()
            bad = await client.generate(prompt="[[fail_after=1]]")
            with pytest.raises(ServerError):
                await bad.collect()
        async with websockets.connect(server.ws_url, subprotocols=[  # type: ignore[list-item]
                "tokenpipe.v1", bearer_subprotocol(key)]) as ws:  # the browser way
            assert ws.subprotocol == "tokenpipe.v1"
            assert json.loads(await ws.recv())["type"] == "hello"
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert key not in log
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    generation_lines = [e for e in entries if "request_id" in e]
    assert {e.get("finish_reason") for e in generation_lines} >= {"stop"}
    assert any(e.get("code") == "engine_error" for e in generation_lines)
    assert all(e["request_id"].startswith("gen-") for e in generation_lines)
