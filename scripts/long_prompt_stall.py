"""How long a bystander's stream stalls while the largest legal prompts arrive.

Starts `tokenpipe serve` (extra arguments are passed on, default `--engine fake`), streams a
paced bystander (tests/e2e/hostile.py), sends three ~1 MiB chat prompts over HTTP and then
over the WebSocket (each refused as too long for the context, after tokenizing), and prints
the bystander's worst stall per door. Run from the repository root:

    .venv/bin/python scripts/long_prompt_stall.py [--engine fake]
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import ServerProcess, running
from tests.e2e.hostile import Bystander

TEXT = "The quick brown fox jumps over the lazy dog. " * 23000  # 1,035,000 bytes


async def one(server: ServerProcess, door: str) -> str:
    body = {"messages": [{"role": "user", "content": TEXT}], "max_tokens": 1}
    if door == "http":
        async with httpx.AsyncClient(timeout=120) as http:
            r = await http.post(server.url + "/v1/chat/completions", json=body)
            return str(r.json()["error"]["code"])
    async with websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                  max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "generate", "id": "x", "messages": body["messages"],
                                  "params": {"max_tokens": 1}}))
        return str(json.loads(await ws.recv()).get("code"))


async def main(args: list[str]) -> None:
    with running(ServerProcess(tuple(args or ["--engine", "fake"]))) as server:
        for door in ("http", "ws"):
            async with Bystander(server.ws_url, tokens=200) as bystander:
                codes = [await one(server, door) for _ in range(3)]
            bystander.check()
            print(f"{door}: {codes}, bystander's worst stall "
                  f"{bystander.worst_stall_s * 1000:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
