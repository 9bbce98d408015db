"""Hostile input and a soak, against a real server on the fake engine.

Fuzzing (hypothesis): random and mutated frames, text and binary, on one connection while a
canary generation streams on it: every frame gets an answer, the server never closes the
connection, and the canary's text arrives whole. Soak: thousands of generations with random
cancels and cut connections; threads, tasks and memory come back to where they were."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from tests.conftest import ServerProcess
from tokenpipe.engines.fake import SCRIPT

pytestmark = pytest.mark.e2e

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
ids = st.text(min_size=0, max_size=70).filter(lambda s: s != "canary")
params = st.fixed_dictionaries({}, optional={
    "max_tokens": st.integers(-5, 9000) | st.text(),
    "temperature": st.floats(-1, 3, allow_nan=False) | st.none(),
    "top_p": st.floats(-1, 2, allow_nan=False),
    "top_k": st.integers(-3, 100),
    "seed": st.integers(-10, 2**64),
    "stop": st.lists(st.text(max_size=3), max_size=3) | st.text(),
    "bogus": json_values,
})
messages = st.lists(st.fixed_dictionaries({
    "role": st.sampled_from(["user", "system", "assistant", "tool", ""]),
    "content": st.text(max_size=40) | st.integers(),
}), max_size=3)
generate = st.fixed_dictionaries({"type": st.just("generate"), "id": ids}, optional={
    "messages": messages, "prompt": st.text(max_size=30), "params": params,
    "resumable": st.booleans() | st.integers(), "model": st.text(max_size=10)})
others = st.fixed_dictionaries({"type": st.sampled_from(["cancel", "resume", "ping", "nope"])},
                               optional={"id": ids, "stream": st.text(max_size=10),
                                         "after_seq": st.integers(-3, 10) | st.text(),
                                         "data": json_values})
frames = st.one_of(
    generate.map(json.dumps), others.map(json.dumps), json_values.map(json.dumps),
    st.text(max_size=200), st.binary(max_size=200),
)


class Canary:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.deltas: list[dict[str, Any]] = []
        self.end: dict[str, Any] | None = None

    def recv(self) -> dict[str, Any]:
        """The next frame that is not the canary's (the canary's are kept)."""
        while True:
            frame = json.loads(self.ws.recv(timeout=20))
            if frame.get("id") == "canary":
                if frame["type"] == "delta":
                    self.deltas.append(frame)
                elif frame["type"] in ("end", "error"):
                    self.end = frame
                continue
            return frame  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def canary(fake_server: ServerProcess) -> Iterator[Canary]:
    with connect(fake_server.ws_url, subprotocols=["tokenpipe.v1"]) as ws:  # type: ignore[list-item]
        json.loads(ws.recv())
        ws.send(json.dumps({"type": "generate", "id": "canary", "params": {"max_tokens": 4000},
                            "messages": [{"role": "user",
                                          "content": "[[pace_ms=4]][[tokens=4000]]"}]}))
        yield Canary(ws)


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=frames)
def test_every_hostile_frame_gets_an_answer_and_nothing_breaks(
    canary: Canary, frame: str | bytes
) -> None:
    time.sleep(0.025)  # two frames an example, under the 100 a second a frame is answered at
    canary.ws.send(frame)
    reply = canary.recv()
    if reply["type"] == "start":  # a valid generate: it runs to its end, or fails cleanly
        gen_id = reply["id"]
        while not (reply.get("id") == gen_id and reply["type"] in ("end", "error")):
            reply = canary.recv()
            assert reply.get("id") in (gen_id, None) or reply["type"] == "error"
    assert reply["type"] in ("error", "pong", "end", "queued")
    if reply["type"] == "error":
        assert reply["code"] in {"bad_request", "duplicate_id", "unknown_id", "unknown_model",
                                 "context_overflow", "rate_limited", "too_many_streams"}
        assert reply["message"]
    while True:  # the connection still answers (a rate-limited ping is retried later)
        canary.ws.send(json.dumps({"type": "ping", "data": "alive"}))
        pong = canary.recv()
        if pong["type"] == "pong":
            break
        assert pong["code"] == "rate_limited"
        time.sleep(pong["retry_after_ms"] / 1000)
    assert pong["data"] == "alive"


def test_the_canary_stream_survived_the_fuzzing_intact(canary: Canary) -> None:
    while canary.end is None:
        time.sleep(0.02)  # under the frame budget: a frame over it gets no answer
        canary.ws.send(json.dumps({"type": "ping"}))
        canary.recv()
    assert canary.end["type"] == "end", canary.end
    text = "".join(d["text"] for d in canary.deltas)
    assert [d["seq"] for d in canary.deltas] == list(range(len(canary.deltas)))
    assert canary.end["usage"]["completion_tokens"] == 4000
    assert text.startswith(SCRIPT) and "\ufffd" not in text[: len(SCRIPT) * 10]


def gauges(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    out = {}
    for name in ("process_resident_memory_bytes", "tokenpipe_threads",
                 "tokenpipe_asyncio_tasks", "tokenpipe_generations_active",
                 "tokenpipe_generations_queued"):
        found = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
        out[name] = float(found.group(1))  # type: ignore[union-attr]
    return out


async def _client(url: str, rng: random.Random, n: int) -> int:
    done = 0
    ws = await websockets.connect(url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
    await ws.recv()
    for i in range(n):
        pace = rng.choice([0, 0, 1])
        await ws.send(json.dumps({"type": "generate", "id": f"s{i}",
                                  "resumable": rng.random() < 0.2, "messages": [
                                      {"role": "user", "content": f"[[pace_ms={pace}]]"}]}))
        action = rng.random()
        if action < 0.3:
            await ws.send(json.dumps({"type": "cancel", "id": f"s{i}"}))
        elif action < 0.4:
            ws.transport.abort()  # cut mid-stream, no close frame
            ws = await websockets.connect(url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
            await ws.recv()
            done += 1
            continue
        while True:
            frame = json.loads(await ws.recv())
            if frame.get("id") == f"s{i}" and frame["type"] in ("end", "error"):
                break
        done += 1
    await ws.close()
    return done


async def test_soak_thousands_of_generations_leave_nothing_behind(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--resume-grace-s", "0.5")
    ws_url = url.replace("http", "ws") + "/ws"
    await _client(ws_url, random.Random(0), 50)  # warm up allocators and caches
    await asyncio.sleep(1.0)
    before = gauges(url)
    rng = random.Random(1)
    done = sum(await asyncio.gather(*(_client(ws_url, random.Random(rng.random()), 100)
                                      for _ in range(20))))
    await asyncio.sleep(1.5)  # resumable orphans expire after their grace
    after = gauges(url)
    print(f"\nsoak: {done} generations; before {before}; after {after}")
    assert done == 2000
    assert after["tokenpipe_generations_active"] == 0
    assert after["tokenpipe_generations_queued"] == 0
    assert after["tokenpipe_threads"] == before["tokenpipe_threads"]
    assert after["tokenpipe_asyncio_tasks"] <= before["tokenpipe_asyncio_tasks"]
    growth = after["process_resident_memory_bytes"] - before["process_resident_memory_bytes"]
    assert growth < 16 * 1024 * 1024, f"RSS grew by {growth / 1e6:.1f} MB"
