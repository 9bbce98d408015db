"""docs/deployment.md's nginx configuration, run as written: nginx in front of two tokenpipe
replicas (openai engine) in front of one tokenpipe upstream on the fake engine."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ROOT, ServerProcess, drop_and_resume, free_port
from tokenpipe.client import Client
from tokenpipe.engines.fake import SCRIPT

pytestmark = pytest.mark.e2e

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
GUIDE = ROOT / "docs" / "deployment.md"


def guide_config() -> str:
    """The nginx block the guide marks as tested."""
    text = GUIDE.read_text()
    after = text[text.index("<!-- nginx-config"):]
    found = re.search(r"```nginx\n(.*?)```", after, re.DOTALL)
    assert found, "docs/deployment.md lost its nginx block"
    return found.group(1)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if not Path(NGINX).is_file():
        pytest.fail("nginx is not installed: scripts/setup.sh --test installs nginx-light "
                    "to check the guide's configuration")
    upstream = ServerProcess(("--engine", "fake"))
    upstream.wait_ready()
    replicas = [ServerProcess(("--engine", "openai", "--upstream", upstream.url,
                               "--model-id", f"chat-{i}")) for i in range(2)]
    for replica in replicas:
        replica.wait_ready()
    port = free_port()
    servers = iter(r.port for r in replicas)
    block = re.sub(r"server 10\.0\.1\.\d+:8000",
                   lambda _: f"server 127.0.0.1:{next(servers)}", guide_config())
    block = block.replace("listen 80;", f"listen 127.0.0.1:{port};")
    tmp = tmp_path_factory.mktemp("nginx")
    temps = "\n".join(f"  {kind}_temp_path {tmp}/{kind};"
                      for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (tmp / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\nworker_processes 1;\npid {tmp}/nginx.pid;\n"
        f"error_log {tmp}/error.log info;\nevents {{ worker_connections 256; }}\n"
        f"http {{\n  access_log {tmp}/access.log;\n{temps}\n{block}\n}}\n")
    nginx = subprocess.Popen([NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert nginx.poll() is None, (tmp / "error.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "nginx did not come up"
            time.sleep(0.1)
        yield {"url": url, "ws": f"ws://127.0.0.1:{port}/ws"}
    finally:
        nginx.terminate()
        nginx.wait(10)
        for server in (*replicas, upstream):
            server.stop()


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
