"""The OpenAI-compatible API (docs/protocol.md section 3) over real servers, with the official
`openai` package as the client: the fake engine for shapes, errors, timing, queueing and
disconnects; the real model for streamed == whole answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
import websockets

from tests.conftest import ServerProcess, broken_model, closed_after_test, running
from tokenpipe.engines.fake import SCRIPT

pytestmark = pytest.mark.e2e

USER: Any = [{"role": "user", "content": "hello"}]


def client(server: ServerProcess, key: str = "unused") -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0))


def aclient(server: ServerProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def sse_lines(response: httpx.Response) -> list[str]:
    return [line for line in response.text.split("\n") if line]


def data_events(lines: list[str]) -> list[Any]:
    out = [ln[6:] for ln in lines if ln.startswith("data: ")]
    return [e if e == "[DONE]" else json.loads(e) for e in out]


def counts(usage: Any) -> tuple[int, int, int]:
    """Usage less the cache's share, which depends on what ran before (cold vs warm)."""
    return usage.prompt_tokens, usage.completion_tokens, usage.total_tokens


def chat_text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# ---- shapes (fake engine) ----------------------------------------------------------------


def test_chat_whole_answer(fake_server: ServerProcess) -> None:
    answer = client(fake_server).chat.completions.create(model="fake", messages=USER)
    assert answer.object == "chat.completion" and answer.model == "fake"
    assert answer.id.startswith("chatcmpl-")
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == SCRIPT
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def test_chat_stream_role_first_finish_last_then_usage(fake_server: ServerProcess) -> None:
    chunks = list(client(fake_server).chat.completions.create(
        model="fake", messages=USER, stream=True,
        stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in chunks[1:] if c.choices)
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    whole = client(fake_server).chat.completions.create(model="fake", messages=USER)
    assert chat_text(chunks) == whole.choices[0].message.content
    assert chunks[-1].usage == whole.usage


def test_without_include_usage_no_usage_chunk(fake_server: ServerProcess) -> None:
    chunks = list(client(fake_server).chat.completions.create(
        messages=USER, model="fake", stream=True))
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)


def test_every_door_s_events_have_one_content_type(fake_server: ServerProcess) -> None:
    """Chat Completions, Completions (plain and resumable, and the resume GET), Anthropic
    Messages and Responses: the same `text/event-stream; charset=utf-8`, as OpenAI's and
    Anthropic's APIs send it."""
    msgs, url = USER, fake_server.url
    types = {}
    with httpx.Client(base_url=url, timeout=10) as http:
        for path, body in (
                ("/v1/chat/completions", {"messages": msgs, "stream": True}),
                ("/v1/chat/completions", {"messages": msgs, "stream": True, "resumable": True}),
                ("/v1/completions", {"prompt": "hi", "stream": True}),
                ("/v1/messages", {"model": "fake", "max_tokens": 8, "messages": msgs,
                                  "stream": True}),
                ("/v1/responses", {"model": "fake", "input": "hi", "stream": True,
                                   "store": False})):
            r = http.post(path, json=body)
            assert r.status_code == 200, r.text
            types[path + (" resumable" if "resumable" in body else "")] = r.headers[
                "content-type"]
            if "resumable" in body:
                again = http.get(f"/v1/streams/{r.headers['x-stream-token']}")
                types["/v1/streams/TOKEN"] = again.headers["content-type"]
    assert set(types.values()) == {"text/event-stream; charset=utf-8"}, types


def test_raw_stream_is_sse_done_right(fake_server: ServerProcess) -> None:
    body = {"messages": USER, "stream": True}
    r = httpx.post(fake_server.url + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-accel-buffering"] == "no"
    assert r.text.endswith("data: [DONE]\n\n")
    events = data_events(sse_lines(r))
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"


def test_completions_whole_and_streamed(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    whole = c.completions.create(model="fake", prompt="[[echo]] abc def", max_tokens=50)
    assert whole.object == "text_completion" and whole.choices[0].text == "abc def"
    assert whole.choices[0].finish_reason == "stop"
    chunks = list(c.completions.create(model="fake", prompt="[[echo]] abc def", max_tokens=50,
                                       stream=True, stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == "abc def"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage == whole.usage


def test_completions_default_max_tokens_is_openais_16(fake_server: ServerProcess) -> None:
    answer = client(fake_server).completions.create(model="fake", prompt="hi")
    assert answer.usage is not None and answer.usage.completion_tokens == 16
    assert answer.choices[0].finish_reason == "length"


async def test_async_client_streams(fake_server: ServerProcess) -> None:
    async with aclient(fake_server) as c:
        stream = await c.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "[[echo]] async ✓"}],
            stream=True)
        chunks = [chunk async for chunk in stream]
    assert chat_text(chunks) == "async ✓"


def test_parameters_are_accepted(fake_server: ServerProcess) -> None:
    answer = client(fake_server).chat.completions.create(
        model="fake", messages=USER, temperature=0.7, top_p=0.9, seed=3,
        presence_penalty=0.1, frequency_penalty=0.1, max_completion_tokens=5, n=1,
        stop=["nothing-like-this"], user="u", metadata={"a": "b"}, store=False,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1})
    assert answer.usage is not None and answer.usage.completion_tokens == 5
    assert answer.choices[0].finish_reason == "length"


def test_stop_string_ends_the_answer_and_is_not_sent(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    prompt: Any = [{"role": "user", "content": "[[echo]] one two STOP three"}]
    whole = c.chat.completions.create(model="fake", messages=prompt, stop="STOP")
    streamed = chat_text(list(c.chat.completions.create(
        model="fake", messages=prompt, stop=["STOP", "zzz"], stream=True)))
    assert whole.choices[0].message.content == streamed == "one two "
    assert whole.choices[0].finish_reason == "stop"


def test_models(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    assert [m.id for m in c.models.list()] == ["fake"]
    assert c.models.retrieve("fake").id == "fake"
    with pytest.raises(openai.NotFoundError) as info:
        c.models.retrieve("gpt-4o")
    assert info.value.code == "model_not_found"


def test_openapi_documents_bodies_json_and_sse(fake_server: ServerProcess) -> None:
    spec = httpx.get(fake_server.url + "/openapi.json").json()
    for path, chunk in (("/v1/chat/completions", "chat.completion.chunk"),
                        ("/v1/completions", "text_completion")):
        op = spec["paths"][path]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        ok = op["responses"]["200"]["content"]
        assert "application/json" in ok
        data = ok["text/event-stream"]["itemSchema"]["properties"]["data"]["anyOf"]
        schema = data[0]["contentSchema"]
        assert data[1]["const"] == "[DONE]"
        assert schema["properties"]["object"]["const"] == chunk
        assert "422" not in op["responses"] and "400" in op["responses"]
    assert "/v1/models" in spec["paths"]
    assert "temperature" in spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert "tools" in spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert "functions" not in spec["components"]["schemas"]["ChatCompletionRequest"][
        "properties"]  # refused: hidden from the schema


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"messages": USER, "temperature": 3}, "temperature", "decimal_above_max_value"),
    ({"messages": USER, "temperature": "warm"}, "temperature", "invalid_type"),
    ({"messages": USER, "max_tokens": -1}, "max_tokens", "integer_below_min_value"),
    ({"messages": USER, "n": 9}, "n", "bad_request"),  # above --max-n (8)
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools",
     "bad_request"),  # the fake engine cannot constrain its output to tool calls
    ({"messages": USER, "response_format": {"type": "json_object"}}, "response_format",
     "bad_request"),  # the fake engine cannot constrain its output
    ({"messages": USER, "surprise": 1}, "surprise", "unknown_parameter"),
    ({"messages": USER, "max_tokens": 100000}, "max_tokens", "context_length_exceeded"),
    ({"messages": USER, "max_completion_tokens": 100000}, "max_completion_tokens",
     "context_length_exceeded"),
    ({"messages": "hello"}, "messages", "invalid_type"),
    ({"model": "fake"}, "messages", "missing_required_parameter"),
])
def test_bad_requests_answer_400_naming_the_param(fake_server: ServerProcess,
                                                  body: dict[str, Any], param: str,
                                                  code: str) -> None:
    for stream in (False, True):
        r = httpx.post(fake_server.url + "/v1/chat/completions", json={**body, "stream": stream},
                       timeout=10)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param
        assert r.json()["error"]["code"] == code
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_a_large_body_is_read_off_the_loop_with_the_same_answers(
        fake_server: ServerProcess) -> None:
    """Bodies over lean.LARGE_BODY (64 KiB) are parsed, validated and converted in a worker
    thread: the same 200, and the same refusals in OpenAI's shape."""
    url, pad = fake_server.url + "/v1/chat/completions", "x" * 70_000
    r = httpx.post(url, json={"messages": USER, "user": pad, "max_tokens": 3}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3
    r = httpx.post(url, json={"messages": "hello", "user": pad}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
    r = httpx.post(url, content=b"{" + b" " * 70_000 + b"nope",
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_context_overflow_keeps_our_message(fake_server: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(fake_server).completions.create(model="fake", prompt="x", max_tokens=100000)
    assert info.value.code == "context_length_exceeded"
    assert info.value.param == "max_tokens"
    assert "exceeds the context" in info.value.message


def test_unknown_model_is_404(fake_server: ServerProcess) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(fake_server).chat.completions.create(model="gpt-4o", messages=USER)
    assert info.value.code == "model_not_found" and info.value.param == "model"


def test_not_json_and_unknown_routes(fake_server: ServerProcess) -> None:
    r = httpx.post(fake_server.url + "/v1/chat/completions", content=b"{nope",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(fake_server.url + "/v1/chat/completions")  # a known route, wrong method
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(fake_server.url + "/v1/audio/speech", json={})
    assert r.status_code == 404 and set(r.json()) == {"error"}


def test_failure_after_start_is_error_event_then_done(fake_server: ServerProcess) -> None:
    body: Any = {"messages": [{"role": "user", "content": "[[fail_after=3]][[pace_ms=5]]"}],
            "stream": True}
    r = httpx.post(fake_server.url + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200
    events = data_events(sse_lines(r))
    assert events[-1] == "[DONE]"
    assert events[-2] == {"error": {"message": "fake engine fault after 3 tokens",
                                    "type": "server_error", "param": None,
                                    "code": "engine_error"}}
    assert [e for e in events[:-2] if "error" in e] == []
    with pytest.raises(openai.APIError, match="fault after 3"):
        list(client(fake_server).chat.completions.create(
            model="fake", messages=body["messages"], stream=True))


def test_failure_before_first_token_is_http_500(fake_server: ServerProcess) -> None:
    messages: Any = [{"role": "user", "content": "[[fail_after=0]]"}]
    for stream in (False, True):
        with pytest.raises(openai.InternalServerError) as info:
            client(fake_server).chat.completions.create(
                model="fake", messages=messages, stream=stream)
        assert info.value.code == "engine_error"


# ---- timing: each delta leaves as produced --------------------------------------------------


async def test_chunks_arrive_spread_over_time(fake_server: ServerProcess) -> None:
    pace_s, tokens = 0.05, 12
    arrivals: list[float] = []
    async with aclient(fake_server) as c:
        t0 = time.monotonic()
        stream = await c.chat.completions.create(
            model="fake", stream=True,
            messages=[{"role": "user", "content": f"[[pace_ms=50]][[tokens={tokens}]]"}])
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.monotonic() - t0)
    # a buffered stream would deliver everything at once, at the end; a slow machine only
    # spreads the chunks further apart
    assert len(arrivals) >= tokens // 2
    assert arrivals[-1] - arrivals[0] >= 0.5 * pace_s * (tokens - 1)


# ---- own servers: API key, pings, queue, overload, disconnect -----------------------------


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--api-key", "s3cret"))) as server:
        yield server


def test_api_key_guards_v1_not_health(keyed_server: ServerProcess) -> None:
    for key in ("wrong", None):
        headers = {"authorization": f"Bearer {key}"} if key else {}
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
            r = httpx.request(method, keyed_server.url + path, json={"messages": USER},
                              headers=headers)
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(keyed_server, "wrong").models.list()
    assert httpx.get(keyed_server.url + "/health").status_code == 200
    answer = client(keyed_server, "s3cret").chat.completions.create(model="fake", messages=USER)
    assert answer.choices[0].message.content == SCRIPT


def test_idle_stream_sends_comment_pings(live_server: Any) -> None:
    url = live_server("--engine", "fake", env={"TOKENPIPE_SSE_PING_INTERVAL_S": "0.05"})
    body: Any = {"messages": [{"role": "user", "content": "[[pace_ms=300]][[tokens=3]]"}],
            "stream": True}
    lines = sse_lines(httpx.post(url + "/v1/chat/completions", json=body, timeout=10))
    assert ": ping" in lines
    data = [i for i, ln in enumerate(lines) if ln.startswith("data: ")]
    assert any(ln == ": ping" for ln in lines[data[1]:data[-1]])  # between tokens too
    raw_text = "".join(e["choices"][0]["delta"].get("content", "")
                       for e in data_events(lines)[:-1])
    sdk = closed_after_test(openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0))
    chunks = list(sdk.chat.completions.create(model="fake", messages=body["messages"],
                                              stream=True))
    assert raw_text and chat_text(chunks) == raw_text  # pings are invisible to the SDK


def test_engine_not_loaded_is_503() -> None:
    server = ServerProcess(("--model", broken_model()))  # the load fails
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/health").json().get("status") == "error":
                    break
            time.sleep(0.1)
        r = httpx.post(server.url + "/v1/chat/completions", json={"messages": USER})
        assert r.status_code == 503
        assert r.json()["error"]["type"] == "server_error"
        assert "broken-model.gguf" in r.json()["error"]["message"]
        assert httpx.get(server.url + "/v1/models").status_code == 503
        with pytest.raises(openai.InternalServerError):
            client(server).chat.completions.create(model="m", messages=USER)
    finally:
        server.stop()


LONG = "[[pace_ms=1000]][[tokens=100000]]"  # 512 tokens (the default max) at 1 s each


async def frames_until(ws: Any, kinds: tuple[str, ...], stream_id: str) -> list[Any]:
    """Frames up to the first of `kinds` (or an error) for stream_id."""
    out = []
    async with asyncio.timeout(30):
        while True:
            frame = json.loads(await ws.recv())
            out.append(frame)
            if frame.get("id") == stream_id and frame["type"] in (*kinds, "error"):
                return out


@contextlib.asynccontextmanager
async def full_server(server: ServerProcess) -> AsyncIterator[Any]:
    """All but one of the fake engine's 64 slots busy with slow WebSocket generations."""
    ws = await websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"])  # type: ignore[list-item]
    await ws.recv()  # hello
    for i in range(63):
        await ws.send(json.dumps({"type": "generate", "id": f"w{i}",
                                  "messages": [{"role": "user", "content": LONG}]}))
    starts = 0
    async with asyncio.timeout(30):
        while starts < 63:
            starts += json.loads(await ws.recv())["type"] == "start"
    try:
        yield ws
    finally:
        await ws.close()


async def queue_probe(ws: Any) -> str:
    """Sends short generations until one gets queued (every slot is taken); returns its id."""
    for attempt in range(200):
        probe = f"p{attempt}"
        await ws.send(json.dumps({"type": "generate", "id": probe,
                                  "messages": [{"role": "user", "content": "[[tokens=1]]"}]}))
        frames = await frames_until(ws, ("queued", "start"), probe)
        if frames[-1]["type"] == "queued":
            return probe
        await frames_until(ws, ("end",), probe)
        await asyncio.sleep(0.05)
    raise AssertionError("the server never filled up")


@pytest.fixture(scope="module")
def small_server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--parallel", "64",
                                "--max-streams-per-connection", "200", "--max-queue", "1"))
                 ) as server:
        yield server


async def test_queue_overload_and_disconnect_free_the_slot(small_server: ServerProcess) -> None:
    url = small_server.url + "/v1/chat/completions"
    async with full_server(small_server) as ws, httpx.AsyncClient(timeout=30) as http:
        # A takes the last slot; its client will leave after two chunks
        a_body = {"messages": [{"role": "user", "content": "[[pace_ms=20]][[tokens=100000]]"}],
                  "max_tokens": 4000, "stream": True}
        async with http.stream("POST", url, json=a_body) as a:
            a_lines = a.aiter_lines()  # kept: a dropped iterator would close the connection
            seen = 0
            while seen < 2:
                seen += (await anext(a_lines)).startswith("data: ")
            # B must wait: 200 at once, then its queue position as a comment
            b_body = {"messages": [{"role": "user", "content": "[[echo]] after A"}],
                      "stream": True}
            async with http.stream("POST", url, json=b_body) as b:
                assert b.status_code == 200
                assert b.headers["content-type"] == "text/event-stream; charset=utf-8"
                b_lines = b.aiter_lines()
                first = await anext(b_lines)
                while not first:
                    first = await anext(b_lines)
                assert first == ": queued position=1"
                # the queue (max 1) is full: C is refused with 429 and Retry-After
                c = await http.post(url, json={"messages": USER})
                assert c.status_code == 429
                assert c.headers["retry-after"] == "1"
                assert c.json()["error"]["type"] == "rate_limit_error"
                with pytest.raises(openai.RateLimitError):
                    client(small_server).chat.completions.create(model="fake", messages=USER)
                await a.aclose()  # A's client leaves: its generation must stop, freeing the
                # slot; otherwise B would wait for A's 4000 tokens (80 s), past the timeout
                rest = [line async for line in b_lines if line]
        events = data_events(rest)
        assert events[-1] == "[DONE]"
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]
                       if e["choices"]) == "after A"

        # a whole (non-streamed) answer whose client leaves stops too
        d_body = {"messages": [{"role": "user", "content": "[[pace_ms=20]][[tokens=100000]]"}],
                  "max_tokens": 4000}
        d = asyncio.create_task(http.post(url, json=d_body))
        probe = await queue_probe(ws)  # D holds the last slot now, the probe waits for it
        d.cancel()  # D's client leaves: the probe must get D's slot, long before D's 80 s
        with contextlib.suppress(asyncio.CancelledError):
            await d
        frames = await frames_until(ws, ("end",), probe)
        assert frames[-1]["type"] == "end"


# ---- the real model ------------------------------------------------------------------------


@pytest.mark.model
def test_real_greedy_streamed_equals_whole(model_server: ServerProcess) -> None:
    c = client(model_server)
    messages: Any = [{"role": "user", "content": "Name three colours."}]
    whole = c.chat.completions.create(model=c.models.list().data[0].id, messages=messages,
                                      temperature=0, max_tokens=24)
    chunks = list(c.chat.completions.create(
        messages=messages, temperature=0, max_tokens=24, stream=True,
        stream_options={"include_usage": True}, model=whole.model))
    assert whole.choices[0].message.content
    assert chat_text(chunks) == whole.choices[0].message.content
    assert counts(chunks[-1].usage) == counts(whole.usage)
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason


@pytest.mark.model
def test_real_completions_greedy_and_seeded(model_server: ServerProcess) -> None:
    c = client(model_server)
    model = c.models.list().data[0].id
    for params in ({"temperature": 0}, {"temperature": 0.9, "seed": 1234, "top_p": 0.95}):
        whole = c.completions.create(model=model, prompt="The capital of France is",
                                     max_tokens=16, **params)
        chunks = list(c.completions.create(model=model, prompt="The capital of France is",
                                           max_tokens=16, stream=True,
                                           stream_options={"include_usage": True},
                                           **params))
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == (
            whole.choices[0].text)
        assert counts(chunks[-1].usage) == counts(whole.usage)


@pytest.mark.model
def test_real_seeded_chat_streamed_equals_whole(model_server: ServerProcess) -> None:
    c = client(model_server)
    messages: Any = [{"role": "user", "content": "Write a line about the sea."}]
    kwargs: dict[str, Any] = {"model": c.models.list().data[0].id, "messages": messages,
                              "temperature": 1.0, "seed": 99, "max_tokens": 24}
    whole = c.chat.completions.create(**kwargs)
    again = c.chat.completions.create(**kwargs)
    streamed = chat_text(list(c.chat.completions.create(**kwargs, stream=True)))
    assert whole.choices[0].message.content == again.choices[0].message.content == streamed


@pytest.mark.model
def test_real_stop_string_absent_from_both(model_server: ServerProcess) -> None:
    c = client(model_server)
    model = c.models.list().data[0].id
    messages: Any = [{"role": "user", "content": "Count from one to ten in words."}]
    free = c.chat.completions.create(model=model, messages=messages, temperature=0,
                                     max_tokens=32).choices[0].message.content
    assert free and len(free) > 8
    stop = free[len(free) // 2: len(free) // 2 + 3]  # three characters from the middle
    expected = free[: free.index(stop)]
    whole = c.chat.completions.create(model=model, messages=messages, temperature=0,
                                      max_tokens=32, stop=[stop])
    streamed = list(c.chat.completions.create(model=model, messages=messages, temperature=0,
                                              max_tokens=32, stop=stop, stream=True))
    assert whole.choices[0].message.content == chat_text(streamed) == expected
    assert whole.choices[0].finish_reason == "stop"
    assert streamed[-1].choices[0].finish_reason == "stop"
