"""A door the server has never heard of, declared in this file alone: one `Door` at a new
prefix (/v1beta, a Gemini-like API) with its own error shape and metrics label, handed to
run_server. The real server (its own HTTP protocol, limits, key check and catch-alls) must
ask it for the key, answer its 401, 404, 405 and 413 in its shape, and count its
generations under its label, with no other module edited.

Run as a module, this file is the server: `python -m tests.e2e.test_new_door PORT`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LOGS, free_port

pytestmark = pytest.mark.e2e
KEY = "s3cret"
AUTH = {"authorization": f"Bearer {KEY}"}
MAX_BODY = 4096
ROOT = Path(__file__).resolve().parents[2]


def fault(status: int, message: str) -> dict[str, Any]:
    """The new door's error shape, unlike any other door's."""
    return {"fault": {"status": status, "text": message}}


def beta_door() -> Any:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tokenpipe.server.doors import Door
    from tokenpipe.session import Delta
    from tokenpipe.types import GenerationRequest, Message

    async def generate(request: Request) -> JSONResponse:
        body = await request.json()
        request_ = GenerationRequest(messages=(Message("user", body["text"]),))
        session = await request.app.state.runtime.models.start(request_, api="beta")
        text = "".join([e.text async for e in session.events() if isinstance(e, Delta)])
        return JSONResponse({"text": text})

    return Door("beta", "/v1beta", lambda: [Route("/v1beta/generate", generate,
                                                  methods=["POST"])],
                fault, ("beta",), key_headers=("x-goog-api-key", "authorization"))


def main(port: int) -> None:
    from tokenpipe.config import Settings
    from tokenpipe.server.app import run_server
    from tokenpipe.server.doors import DOORS

    run_server(Settings(engine="fake", port=port, api_key=KEY, max_body_bytes=MAX_BODY,
                        log_level="warning"), doors=(*DOORS, beta_door()))


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = free_port()
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"new-door-{port}.log"
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.e2e.test_new_door", str(port)],
                                cwd=ROOT, env=os.environ.copy(), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert proc.poll() is None, log_path.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/health", timeout=2).status_code == 200:
                        break
                time.sleep(0.1)
            yield base
        finally:
            proc.terminate()
            proc.wait(30)


def test_the_new_door_needs_the_key_and_answers_its_own_401(url: str) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"x-goog-api-key": "wrong"}):
        r = httpx.post(url + "/v1beta/generate", json={"text": "hi"}, headers=headers)
        assert r.status_code == 401
        assert r.json()["fault"]["status"] == 401, r.text
    ok = httpx.post(url + "/v1beta/generate", json={"text": "[[tokens=3]]"},
                    headers={"x-goog-api-key": KEY})  # the header this door reads
    assert ok.status_code == 200 and ok.json()["text"]


def test_the_new_door_answers_404_and_405_in_its_own_shape(url: str) -> None:
    r = httpx.get(url + "/v1beta/models/nope", headers=AUTH)
    assert r.status_code == 404
    assert r.json() == fault(404, "Invalid URL (GET /v1beta/models/nope)")
    r = httpx.get(url + "/v1beta/generate", headers=AUTH)
    assert (r.status_code, r.headers["allow"]) == (405, "POST")
    assert r.json() == fault(405, "Method GET not allowed on /v1beta/generate; use POST")


def test_the_http_limits_refuse_in_the_new_doors_shape(url: str) -> None:
    r = httpx.post(url + "/v1beta/generate", headers=AUTH,
                   content=b'{"text": "' + b"x" * MAX_BODY + b'"}')
    assert r.status_code == 413
    assert r.json()["fault"]["status"] == 413
    assert "over" in r.json()["fault"]["text"]


def test_the_new_doors_generations_are_counted_under_its_label(url: str) -> None:
    r = httpx.post(url + "/v1beta/generate", json={"text": "[[tokens=5]]"}, headers=AUTH)
    assert r.status_code == 200
    metrics = httpx.get(url + "/metrics").text  # public, as before
    assert 'tokenpipe_tokens_generated_total{api="beta"}' in metrics


def test_the_old_doors_keep_their_own_shapes_beside_it(url: str) -> None:
    r = httpx.get(url + "/v1/models")
    assert (r.status_code, r.json()["error"]["code"]) == (401, "invalid_api_key")
    assert httpx.get(url + "/api/tags").json() == {
        "error": "unauthorized: missing or wrong API key (send Authorization: Bearer KEY)"}


if __name__ == "__main__":
    main(int(sys.argv[1]))
