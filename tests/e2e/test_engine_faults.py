"""A fault in the real llama.cpp decode loop, injected into a real server
(tests/faults/sitecustomize.py): it fails what was running, at once and in each door's own
shape; the engine comes back by itself; if it cannot, /health says why."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, ServerProcess, running
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]
if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

LONG = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


@pytest.fixture
def faults(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Path]]:
    decode, context = tmp_path / "decode", tmp_path / "context"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT / "tests" / "faults"), os.environ.get("PYTHONPATH")])),
        "TOKENPIPE_TEST_DECODE_FAULT": str(decode),
        "TOKENPIPE_TEST_CONTEXT_FAULT": str(context)}
    server = ServerProcess(("--parallel", "2", "--ctx-size", "2048"), env)
    with running(server):
        yield server, decode, context


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


def wait_health(url: str, status: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = httpx.get(url + "/health").json()
        if body["status"] == status or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


async def test_a_decode_fault_fails_the_streams_in_flight_and_the_engine_recovers(
    faults: tuple[ServerProcess, Path, Path],
) -> None:
    server, decode, _ = faults
    async with Client(server.ws_url) as client:
        one = await client.generate(LONG, params={"max_tokens": 300})
        two = await client.generate(LONG, params={"max_tokens": 300, "temperature": 0.7})
        texts = 0
        async for _ in one:
            texts += 1
            if texts == 3:
                decode.touch()  # the next llama_decode raises
                break
        for gen in (one, two):
            with pytest.raises(Exception) as failed:
                await gen.collect()
            assert getattr(failed.value, "code", None) == "engine_error"
            assert "injected decode fault" in str(failed.value)
        # the same connection, the next request: a fresh context answers it
        again = await client.generate([{"role": "user", "content": "Say hi."}],
                                      params={"max_tokens": 8})
        assert await again.collect()
        assert again.end is not None and again.end["finish_reason"] in ("stop", "length")
    assert wait_health(server.url, "ok")["status"] == "ok"
    assert metric(server.url, "tokenpipe_engine_failures_total") == 1
    assert metric(server.url, "tokenpipe_engine_restarts_total") == 1


async def test_each_door_reports_the_fault_in_its_own_shape(
    faults: tuple[ServerProcess, Path, Path],
) -> None:
    server, decode, _ = faults
    body = {"messages": LONG, "max_tokens": 200}
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        decode.touch()  # fails at prefill: before the first token
        whole = await http.post("/v1/chat/completions", json=body)
        assert whole.status_code == 500
        error = whole.json()["error"]
        assert error["type"] == "server_error" and "injected decode fault" in error["message"]

        events: list[Any] = []
        async with http.stream("POST", "/v1/chat/completions",
                               json={**body, "stream": True}) as streamed:
            assert streamed.status_code == 200
            async for line in streamed.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
                if len(events) == 3:
                    decode.touch()  # fails mid-answer: in-band, then [DONE]
        assert events[-1] == "[DONE]"
        assert "injected decode fault" in events[-2]["error"]["message"]
        assert all("choices" in e for e in events[:-2])

        ok = await http.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8})
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"]
    assert metric(server.url, "tokenpipe_engine_restarts_total") == 2


async def test_an_engine_that_cannot_recover_says_why_in_health(
    faults: tuple[ServerProcess, Path, Path],
) -> None:
    server, decode, context = faults
    context.touch()  # no fresh context can be made
    decode.touch()
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        first = await http.post("/v1/chat/completions", json={"messages": LONG,
                                                              "max_tokens": 20})
        assert first.status_code == 500
        health = wait_health(server.url, "error")
        assert health["status"] == "error"
        assert "injected decode fault" in health["error"]
        assert "fresh context failed" in health["error"]
        later = await http.post("/v1/chat/completions", json={"messages": LONG,
                                                              "max_tokens": 20})
        assert later.status_code == 503
        assert "fresh context failed" in later.json()["error"]["message"]
    assert metric(server.url, "tokenpipe_engine_failures_total") == 1
    assert metric(server.url, "tokenpipe_engine_restarts_total") == 0
