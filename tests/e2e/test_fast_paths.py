"""The measured shortcuts are the ones `tokenpipe serve` takes (direct frame writes on
/ws, the lean handler of the generation routes), and the ordinary paths beside them still
serve the same answers where the shortcut is unavailable (another ASGI server, an app
without the lean routes)."""

from __future__ import annotations

import json

import httpx
from starlette.testclient import TestClient

from tests.conftest import ServerProcess, running
from tokenpipe.client import Client
from tokenpipe.config import Settings
from tokenpipe.engines.fake import SCRIPT, FakeEngine
from tokenpipe.server.app import create_app

USER = [{"role": "user", "content": "hi"}]


async def test_tokenpipe_serve_takes_both_fast_paths() -> None:
    with running(ServerProcess(("--engine", "fake", "--log-level", "debug"))) as server:
        async with Client(server.ws_url) as client:
            gen = await client.generate(messages=USER)
            assert await gen.collect() == SCRIPT
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(server.url + "/v1/chat/completions", json={"messages": USER})
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == SCRIPT
        log = server.log()
    assert "tokenpipe.v1 connection: frames written directly" in log
    assert "/v1/chat/completions: the lean handler" in log


def test_the_ordinary_paths_serve_the_same_answers() -> None:
    app = create_app(Settings(engine="fake"), engine=FakeEngine())
    with TestClient(app) as http:  # no uvicorn: frames go through the ASGI send
        with http.websocket_connect("/ws", subprotocols=["tokenpipe.v1"]) as ws:
            assert ws.receive_json()["type"] == "hello"
            ws.send_text(json.dumps({"type": "generate", "id": "a", "messages": USER}))
            frames = []
            while not frames or frames[-1]["type"] != "end":
                frames.append(ws.receive_json())
        assert "".join(f["text"] for f in frames if f["type"] == "delta") == SCRIPT
        lean = http.post("/v1/chat/completions", json={"messages": USER}).json()
        app.router.routes[:] = [r for r in app.router.routes
                                if type(r).__name__ != "Route"
                                or not r.path.startswith("/v1/")]  # FastAPI's routes serve
        plain = http.post("/v1/chat/completions", json={"messages": USER}).json()
        refused = http.post("/v1/chat/completions", json={"messages": []})
    assert lean["choices"] == plain["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": SCRIPT, "refusal": None},
         "logprobs": None, "finish_reason": "stop"}]
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "messages"
