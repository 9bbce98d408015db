"""Resumable Chat Completions SSE on the real bundled model: a seeded (temperature > 0)
stream dropped after a few events and resumed with GET /v1/streams/TOKEN equals an
uninterrupted run of the same request, chat (the openai SDK, `extra_body`) and completions
(the X-Resumable header, resumed through the SDK); the one store: an SSE token resumed
over tokenpipe.v1 and a v1 token over the GET; an unknown token is a 404.
The gateway's own behaviour (grace expiry, take-over, refusals): test_resumable_sse_gateway."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk

from tests.conftest import ServerProcess, running
from tests.e2e.sse_reader import drop_after, events, ids, text_of
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]
MESSAGES = [{"role": "user", "content": "Write a short poem about the sea."}]
SAMPLING: dict[str, Any] = {"temperature": 0.9, "seed": 7, "max_tokens": 40}
AWAY_S = 0.5  # how long a dropped client stays away: the generation runs on meanwhile


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    if not os.environ.get("CI"):  # in CI a missing model is a failure, not a skip
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    # split: the test compares answers across requests (docs/determinism.md)
    with running(ServerProcess(("--parallel", "2", "--kv-cache", "split"))) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def model(oai: openai.OpenAI) -> str:
    return oai.models.list().data[0].id


@pytest.fixture(scope="module")
def uninterrupted(http: httpx.Client, model: str) -> str:
    """The chat answer streamed without `resumable`: as it always was, no token, no ids."""
    body = {"model": model, "messages": MESSAGES, "stream": True, **SAMPLING}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert "x-stream-token" not in response.headers
        lines = list(response.iter_lines())
    assert not [line for line in lines if line.startswith("id:")]
    text = text_of(events(iter(lines)))
    assert len(text) > 20
    return text


def test_a_dropped_chat_stream_resumed_equals_an_uninterrupted_run(
        oai: openai.OpenAI, http: httpx.Client, model: str, uninterrupted: str,
        server: ServerProcess) -> None:
    kwargs: Any = {"model": model, "messages": MESSAGES, "stream": True, **SAMPLING}
    raw = oai.chat.completions.with_raw_response.create(**kwargs,
                                                        extra_body={"resumable": True})
    token = raw.headers["x-stream-token"]
    assert len(token) >= 32
    stream: openai.Stream[ChatCompletionChunk] = raw.parse()
    first: list[ChatCompletionChunk] = []
    for chunk in stream:
        first.append(chunk)
        if len(first) == 4:  # the opening chunk (id 0) and three deltas (ids 1 to 3)
            break
    stream.close()  # the connection drops
    time.sleep(AWAY_S)
    with http.stream("GET", f"/v1/streams/{token}", headers={"Last-Event-ID": "3"}
                     ) as response:
        assert response.status_code == 200
        rest = events(response.iter_lines())
    assert ids(rest) == list(range(4, 4 + len(rest) - 1)) and rest[-1].data == "[DONE]"
    text = "".join(c.choices[0].delta.content or "" for c in first) + text_of(rest)
    assert text == uninterrupted
    heads = {(c.id, c.created, c.model) for c in first}
    heads |= {(c.json["id"], c.json["created"], c.json["model"]) for c in rest[:-1]}
    assert heads == {(first[0].id, first[0].created, model)}
    log = server.log_path.read_text()  # the token is a credential: the access log hides it
    assert token not in log and '"GET /v1/streams/[redacted] HTTP/1.1" 200' in log
    assert rest[-2].json["choices"][0]["finish_reason"] in ("stop", "length")


def test_a_dropped_completion_stream_resumed_equals_an_uninterrupted_run(
        oai: openai.OpenAI, http: httpx.Client, model: str) -> None:
    kwargs: dict[str, Any] = {"model": model, "prompt": "The sea at night is", **SAMPLING}
    whole = "".join(c.choices[0].text for c in oai.completions.create(**kwargs, stream=True))
    token, seen = drop_after(http, "/v1/completions", {**kwargs, "stream": True}, 3,
                             headers={"X-Resumable": "1"})
    assert ids(seen) == [1, 2, 3]  # a completion stream has no opening chunk
    time.sleep(AWAY_S)
    rest = oai.get(f"/streams/{token}?last_event_id=3", cast_to=Completion, stream=True,
                   stream_cls=openai.Stream[Completion])
    chunks = list(rest)
    assert {c.object for c in chunks} == {"text_completion"}
    assert len(whole) > 20
    assert text_of(seen) + "".join(c.choices[0].text for c in chunks) == whole


def test_an_sse_token_resumes_over_tokenpipe_v1(server: ServerProcess, http: httpx.Client,
                                               model: str, uninterrupted: str) -> None:
    body = {"model": model, "messages": MESSAGES, "stream": True, "resumable": True,
            **SAMPLING}
    token, seen = drop_after(http, "/v1/chat/completions", body, 3)  # ids 0, 1, 2
    time.sleep(AWAY_S)

    async def resume() -> tuple[str, dict[str, Any]]:
        async with Client(server.ws_url) as v1:  # the SSE id of delta seq s is s + 1
            gen = await v1.resume(token, int(seen[-1].id or 0) - 1, "again")
            text = await gen.collect()
            assert gen.end is not None and gen.start is not None
            assert [d["seq"] for d in gen.deltas] == list(range(2, 2 + len(gen.deltas)))
            return text, gen.end

    rest, end = asyncio.run(resume())
    assert end["finish_reason"] in ("stop", "length")
    assert text_of(seen) + rest == uninterrupted


def test_a_v1_token_resumes_over_the_get(server: ServerProcess, http: httpx.Client,
                                         model: str, uninterrupted: str) -> None:
    async def start() -> tuple[str, list[dict[str, Any]]]:
        async with Client(server.ws_url) as v1:
            gen = await v1.generate(MESSAGES, params=SAMPLING, model=model, resumable=True)
            async for _ in gen:
                if len(gen.deltas) == 3:
                    break
            assert gen.start is not None
            return gen.start["stream"], list(gen.deltas)

    token, deltas = asyncio.run(start())  # the connection closes: the client is gone
    time.sleep(AWAY_S)
    after = deltas[-1]["seq"] + 1  # the SSE id of that delta
    with http.stream("GET", f"/v1/streams/{token}?last_event_id={after}") as response:
        assert response.status_code == 200
        rest = events(response.iter_lines())
    chunks = [c.json for c in rest[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {model} and len({c["id"] for c in chunks}) == 1
    assert ids(rest)[0] == after + 1
    assert "".join(d["text"] for d in deltas) + text_of(rest) == uninterrupted


def test_an_unknown_token_is_a_404(http: httpx.Client) -> None:
    response = http.get("/v1/streams/" + "A" * 32, headers={"Last-Event-ID": "3"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "stream_not_found"


BROWSER_JS = """async (url) => await new Promise((resolve) => {
  const got = [];
  let opens = 0;
  const source = new EventSource(url);
  source.onopen = () => { opens += 1; got.push(["open", ""]); };
  source.onmessage = (e) => {
    got.push([e.lastEventId, e.data]);
    // not closed at the first [DONE]: EventSource reconnects when a response ends, with
    // Last-Event-ID set to the last id it saw; the second [DONE] ends it
    if (e.data === "[DONE]" && opens === 2) { source.close(); resolve(got); }
  };
  setTimeout(() => { source.close(); resolve(got); }, 20000);
})"""


def test_a_browser_eventsource_resumes_and_reconnects_with_last_event_id(
        server: ServerProcess, http: httpx.Client, model: str, uninterrupted: str) -> None:
    from playwright.sync_api import sync_playwright  # the test extra: missing fails

    chromium = os.environ.get("TOKENPIPE_CHROMIUM", "/usr/bin/chromium")
    if not os.path.isfile(chromium):
        pytest.fail(f"no Chromium at {chromium}: apt-get install -y chromium")
    body = {"model": model, "messages": MESSAGES, "stream": True, "resumable": True,
            **SAMPLING}
    token, seen = drop_after(http, "/v1/chat/completions", body, 3)  # ids 0, 1, 2
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking"])
        try:
            page = browser.new_page()
            page.goto(server.url + "/health")  # same origin as the stream
            # EventSource cannot set a header on its first request: the query says where
            # to start; on its reconnection its own Last-Event-ID header wins over it
            got = page.evaluate(BROWSER_JS, f"/v1/streams/{token}?last_event_id=2")
        finally:
            browser.close()
    opened = [i for i, (event_id, _) in enumerate(got) if event_id == "open"]
    assert len(opened) == 2, got
    first, second = got[1:opened[1]], got[opened[1] + 1:]
    assert first[-1][1] == "[DONE]" and int(first[-2][0]) >= 3
    # the reconnection sent Last-Event-ID: the finish chunk's id, so only [DONE] is left
    # (the query's 2 would have replayed every chunk after id 2 again)
    assert [data for _, data in second] == ["[DONE]"]
    ids_seen = [int(event_id) for event_id, data in first if data != "[DONE]"]
    assert ids_seen == list(range(3, 3 + len(ids_seen)))
    chunks = [json.loads(data) for _, data in first[:-1]]
    text = text_of(seen) + "".join(c["choices"][0]["delta"].get("content") or ""
                                   for c in chunks if c["choices"])
    assert text == uninterrupted
