"""Several models in one server: hello and /v1/models list them, `model` routes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tokenpipe.client import Client, ServerError

pytestmark = pytest.mark.e2e


async def test_two_models_are_listed_and_routed(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--model", "alpha=fake:", "--model", "beta=fake:")
    async with Client(url.replace("http", "ws") + "/ws") as client:
        assert client.hello["models"] == ["alpha", "beta"]
        a = await client.generate(prompt="[[tokens=3]]", model="alpha")
        b = await client.generate(prompt="[[tokens=3]]", model="beta")
        default = await client.generate(prompt="[[tokens=3]]")
        for gen in (a, b, default):
            await gen.collect()
        assert a.start is not None and a.start["model"] == "alpha"
        assert b.start is not None and b.start["model"] == "beta"
        assert default.start is not None and default.start["model"] == "alpha"
        unknown = await client.generate(prompt="x", model="gamma")
        with pytest.raises(ServerError) as info:
            await unknown.collect()
        assert info.value.code == "unknown_model"
        assert "alpha" in info.value.message and "beta" in info.value.message
    listed = (await asyncio.to_thread(httpx.get, url + "/v1/models")).json()
    assert [m["id"] for m in listed["data"]] == ["alpha", "beta"]


def test_a_bad_model_spec_is_a_clear_error(live_server: Any) -> None:
    from tests.conftest import ServerProcess

    server = ServerProcess(("--engine", "fake", "--model", "alpha=fake:", "--model", "nope"))
    try:
        assert server.proc.wait(timeout=30) != 0
        assert "NAME=[ENGINE:]SPEC" in server.log()
    finally:
        server.stop()
