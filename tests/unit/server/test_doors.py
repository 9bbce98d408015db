"""The door table (server/doors.py) and what reads it: which door owns a path, the order
doors are mounted in, the API key denied by default, and each real door's 401, 404 and 405
in its own shape. The app is driven over ASGI (no answer here streams)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tokenpipe.bench.cli import APIS as BENCH_APIS
from tokenpipe.bench.cli import HTTP_APIS
from tokenpipe.config import Settings
from tokenpipe.server.app import create_app
from tokenpipe.server.doors import (
    ANTHROPIC,
    DOORS,
    OLLAMA,
    OPENAI,
    RESPONSES,
    WS,
    Door,
    api_labels,
    door_at,
    error_body,
    mount_order,
)
from tokenpipe.server.http_limits import error_body as refusal_body
from tokenpipe.server.sessions import ModelRegistry
from tokenpipe.types import GenerationRequest

KEY = "s3cret"
OPENAI_401 = {"error": {"message": "Incorrect or missing API key: send Authorization: "
                        "Bearer KEY", "type": "authentication_error", "param": None,
                        "code": "invalid_api_key"}}
ANTHROPIC_401 = {"type": "error", "error": {"type": "authentication_error", "message":
                 "invalid x-api-key: send x-api-key: KEY (or Authorization: Bearer KEY)"}}
OLLAMA_401 = {"error": "unauthorized: missing or wrong API key (send Authorization: Bearer "
                       "KEY)"}


def openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": None}}


def anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


@pytest.mark.parametrize(("path", "door"), [
    ("/v1/chat/completions", OPENAI), ("/v1", OPENAI), ("/v1/messages", ANTHROPIC),
    ("/v1/messages/count_tokens", ANTHROPIC), ("/v1/messagesx", OPENAI),
    ("/v1/responses/r1/cancel", RESPONSES), ("/api", OLLAMA), ("/api/chat", OLLAMA),
    ("/ws", WS), ("/apix", None), ("/health", None), ("/", None), ("/v2/chat", None),
])
def test_the_longest_prefix_owns_a_path(path: str, door: Door | None) -> None:
    assert door_at(path, DOORS) is door


def test_a_door_inside_another_is_mounted_first() -> None:
    order = [d.name for d in mount_order(DOORS)]
    assert order.index("anthropic") < order.index("openai")
    assert order.index("responses") < order.index("openai")


def test_labels_and_bench_names_come_from_the_table() -> None:
    assert api_labels(DOORS) == {"ws", "plain", "openai_chat", "openai_completions",
                                 "anthropic", "responses", "ollama_chat", "ollama_generate",
                                 "other"}
    assert BENCH_APIS == ("ws", "sse", "anthropic", "responses", "ollama")
    assert HTTP_APIS == ("sse", "anthropic", "responses", "ollama")
    assert len({d.name for d in DOORS}) == len(DOORS)
    assert len({d.prefix for d in DOORS}) == len(DOORS)


async def test_a_start_with_a_label_no_door_declares_is_refused() -> None:
    with pytest.raises(ValueError, match="api must be one of"):
        await ModelRegistry().start(GenerationRequest(prompt="a"), api="gemini")


def test_an_error_takes_the_shape_of_its_path() -> None:
    assert error_body(413, "big", "/v1/messages", DOORS) == {
        "type": "error", "error": {"type": "request_too_large", "message": "big"}}
    assert error_body(413, "big", "/api/chat", DOORS) == {"error": "big"}
    assert error_body(413, "big", "/api", DOORS) == {"error": "big"}
    assert error_body(413, "big", "/metrics", DOORS) == {"detail": "big"}
    assert error_body(401, "no", "/v1/responses", DOORS) == OPENAI_401
    # the HTTP limits read the path without its query string
    assert b"request_too_large" in refusal_body(413, "big", b"/v1/messages?beta=true")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(engine="fake", api_key=KEY))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        yield client


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/chat/completions", OPENAI_401), ("GET", "/v1/models", OPENAI_401),
    ("GET", "/v1/nope", OPENAI_401), ("GET", "/v1", OPENAI_401),
    ("POST", "/v1/responses", OPENAI_401), ("GET", "/v1/streams/abc", OPENAI_401),
    ("POST", "/v1/messages", ANTHROPIC_401), ("GET", "/v1/messages/x", ANTHROPIC_401),
    ("POST", "/api/chat", OLLAMA_401), ("GET", "/api", OLLAMA_401),
    ("POST", "/", {"detail": "Incorrect or missing API key: send Authorization: Bearer KEY"}),
    ("GET", "/not-a-page-file.js",
     {"detail": "Incorrect or missing API key: send Authorization: Bearer KEY"}),
])
async def test_every_route_needs_the_key_in_its_doors_shape(
    http: httpx.AsyncClient, method: str, path: str, body: dict[str, Any],
) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"x-api-key": "wrong"}):
        r = await http.request(method, path, headers=headers)
        assert (r.status_code, r.json()) == (401, body), (path, headers)


@pytest.mark.parametrize("path", ["/health", "/metrics", "/openapi.json", "/docs", "/redoc",
                                  "/", "/index.html"])
async def test_health_metrics_docs_and_the_page_stay_public(
    http: httpx.AsyncClient, path: str,
) -> None:
    r = await http.get(path)
    assert r.status_code != 401, path
    assert (await http.head(path)).status_code != 401, path


@pytest.mark.parametrize("headers", [{"authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}])
async def test_the_key_opens_every_door(http: httpx.AsyncClient,
                                        headers: dict[str, str]) -> None:
    for path in ("/v1/nope", "/v1/messages/nope", "/api/nope", "/v1/responses/a/b/c"):
        assert (await http.get(path, headers=headers)).status_code == 404, path


@pytest.mark.parametrize(("method", "path", "status", "body", "allow"), [
    ("GET", "/v1/chat/completions", 405,
     openai_error("Method GET not allowed on /v1/chat/completions; use POST"), "POST"),
    ("POST", "/v1/models", 405, openai_error("Method POST not allowed on /v1/models; use GET"),
     "GET"),
    ("DELETE", "/v1/models/fake", 405,
     openai_error("Method DELETE not allowed on /v1/models/fake; use GET"), "GET"),
    ("POST", "/v1/streams/tok", 405,
     openai_error("Method POST not allowed on /v1/streams/tok; use GET"), "GET"),
    ("GET", "/v1/embeddings", 405,
     openai_error("Method GET not allowed on /v1/embeddings; use POST"), "POST"),
    ("GET", "/v1/audio/speech", 404, openai_error("Invalid URL (GET /v1/audio/speech)"), None),
    ("GET", "/v1/messages", 405,
     anthropic_error("Method GET not allowed on /v1/messages; use POST"), "POST"),
    ("PUT", "/v1/messages/count_tokens", 405, anthropic_error(
        "Method PUT not allowed on /v1/messages/count_tokens; use POST"), "POST"),
    ("POST", "/v1/messages/batches", 404,
     {"type": "error", "error": {"type": "not_found_error",
                                 "message": "Not found: POST /v1/messages/batches"}}, None),
    ("GET", "/v1/responses", 405,
     openai_error("Method GET not allowed on /v1/responses; use POST"), "POST"),
    ("PUT", "/v1/responses/r1", 405,
     openai_error("Method PUT not allowed on /v1/responses/r1; use GET, DELETE"),
     "GET, DELETE"),
    ("GET", "/v1/responses/r1/cancel", 405,
     openai_error("Method GET not allowed on /v1/responses/r1/cancel; use POST"), "POST"),
    ("GET", "/v1/responses/r1/x/y", 404,
     openai_error("Invalid URL (GET /v1/responses/r1/x/y)"), None),
    ("GET", "/api/chat", 405, {"error": "method GET not allowed on /api/chat; use POST"},
     "POST"),
    ("POST", "/api/ps", 405, {"error": "method POST not allowed on /api/ps; use GET, HEAD"},
     "GET, HEAD"),
    ("GET", "/api/nope", 404, {"error": "404 page not found: GET /api/nope"}, None),
    ("POST", "/api", 404, {"error": "404 page not found: POST /api"}, None),
    ("POST", "/api/pull", 501, {"error": "/api/pull is not supported: this server serves the "
                                         "models it was started with (GET /api/tags lists "
                                         "them)"}, None),
    ("DELETE", "/api/blobs/sha256:1", 501, None, None),
])
async def test_each_doors_404_and_405_are_in_its_own_shape(
    http: httpx.AsyncClient, method: str, path: str, status: int,
    body: dict[str, Any] | None, allow: str | None,
) -> None:
    r = await http.request(method, path, headers={"authorization": f"Bearer {KEY}"})
    assert r.status_code == status, r.text
    if body is not None:
        assert r.json() == body
    assert r.headers.get("allow") == allow
