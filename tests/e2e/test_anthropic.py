"""The Anthropic Messages door (docs/protocol.md, "Anthropic Messages HTTP") over real
servers, with the official `anthropic` package as the client: the fake engine for shapes,
errors, queueing, faults and disconnects; the real model for the same text as
/v1/chat/completions."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test, running
from tokenpipe.engines.fake import SCRIPT, fake_tokenize

pytestmark = pytest.mark.e2e

USER: Any = [{"role": "user", "content": "hello"}]


def client(server: ServerProcess | str, key: str = "unused") -> anthropic.Anthropic:
    url = server if isinstance(server, str) else server.url
    c = closed_after_test(anthropic.Anthropic(base_url=url, api_key=key, max_retries=0))
    return c


def oai_client(server: ServerProcess) -> openai.OpenAI:
    c = closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0))
    return c


def events(text: str) -> list[tuple[str, Any]]:
    """(event name, data) of every named SSE event, in order."""
    out = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        if lines[0].startswith("event: "):
            out.append((lines[0][7:], json.loads(lines[1].removeprefix("data: "))))
    return out


def metric(text: str, name: str) -> float:
    """A counter from /metrics, summed over its labels (the `api`, ...)."""
    return sum(map(float, re.findall(re.escape(name) + r"(?:\{[^}]*\})? ([0-9.e+-]+)", text)))


# ---- shapes (fake engine) ----------------------------------------------------------------


def test_create_whole_message(fake_server: ServerProcess) -> None:
    message = client(fake_server).messages.create(model="fake", max_tokens=400, messages=USER)
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == "fake"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == SCRIPT  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.output_tokens > 0 and message.usage.input_tokens > 0
    assert message.usage.cache_read_input_tokens == 0


def test_stream_text_and_final_message(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    with c.messages.stream(model="fake", max_tokens=400, messages=USER) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    whole = c.messages.create(model="fake", max_tokens=400, messages=USER)
    assert len(pieces) > 10  # token by token, not one block
    assert "".join(pieces) == SCRIPT == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == whole.stop_reason == "end_turn"
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_raw_stream_is_anthropics_event_order(fake_server: ServerProcess) -> None:
    body = {"model": "fake", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "[[echo]] a b c"}]}
    r = httpx.post(fake_server.url + "/v1/messages", json=body, timeout=10,
                   headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    got = events(r.text)
    names = [n for n, _ in got]
    assert names == ["message_start", "content_block_start", "ping",
                     *["content_block_delta"] * (len(names) - 6),
                     "content_block_stop", "message_delta", "message_stop"]
    assert all(n == d["type"] for n, d in got)  # the event line names its data's type
    assert "".join(d["delta"]["text"] for n, d in got if n == "content_block_delta") == "a b c"
    assert got[-2][1]["usage"]["output_tokens"] > 0


def test_count_tokens_counts_as_a_generation_does(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    system = "You are terse."
    messages: Any = [{"role": "user", "content": "[[echo]] first"},
                     {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                     {"role": "user", "content": [{"type": "text", "text": "[[echo]] two"},
                                                  {"type": "text", "text": "parts"}]}]
    counted = c.messages.count_tokens(model="fake", system=system, messages=messages)
    answer = c.messages.create(model="fake", max_tokens=20, system=system, messages=messages)
    # system first, every turn in order, the text blocks joined with newlines: the fake
    # engine's template, tokenized by its byte-level tokenizer
    rendered = (f"<|system|>{system}<|end|><|user|>[[echo]] first<|end|><|assistant|>ok<|end|>"
                "<|user|>[[echo]] two\nparts<|end|><|assistant|>")
    assert counted.input_tokens == len(fake_tokenize(rendered.encode()))
    assert counted.input_tokens == (answer.usage.input_tokens
                                    + (answer.usage.cache_read_input_tokens or 0))
    assert answer.content[0].text == "two\nparts"  # type: ignore[union-attr]


def test_stop_sequences_end_the_answer_unsent(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    messages: Any = [{"role": "user", "content": "[[echo]] one two STOP three"}]
    whole = c.messages.create(model="fake", max_tokens=50, messages=messages,
                              stop_sequences=["STOP"])
    with c.messages.stream(model="fake", max_tokens=50, messages=messages,
                           stop_sequences=["zzz", "STOP"]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert whole.content[0].text == streamed == "one two "  # type: ignore[union-attr]
    assert whole.stop_reason == final.stop_reason == "stop_sequence"
    assert whole.stop_sequence == final.stop_sequence == "STOP"  # the one that matched
    free = c.messages.create(model="fake", max_tokens=50, messages=messages,
                             stop_sequences=["zzz"])
    assert free.stop_reason == "end_turn" and free.stop_sequence is None


def test_max_tokens_is_stop_reason_max_tokens(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    whole = c.messages.create(model="fake", max_tokens=7, messages=USER)
    with c.messages.stream(model="fake", max_tokens=7, messages=USER) as stream:
        final = stream.get_final_message()
    assert whole.stop_reason == final.stop_reason == "max_tokens"
    assert whole.usage.output_tokens == final.usage.output_tokens == 7


def test_sampling_fields_and_ignored_ones_are_taken(fake_server: ServerProcess) -> None:
    message = client(fake_server).messages.create(
        model="fake", max_tokens=5, messages=USER, metadata={"user_id": "u"},
        service_tier="auto", extra_body={"temperature": 0.3, "top_p": 0.9, "top_k": 20})
    assert message.stop_reason == "max_tokens"


# ---- errors -------------------------------------------------------------------------------


def anthropic_error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == kind
    message: str = body["error"]["message"]
    return message


@pytest.mark.parametrize(("body", "message"), [
    ({"model": "fake", "messages": USER}, "max_tokens: Field required"),
    ({"model": "fake", "max_tokens": 5, "temperature": 3, "messages": USER}, "temperature:"),
    ({"model": "fake", "max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}]},
     "messages.0.content.0.type: content blocks of type 'image' are not supported"),
    ({"model": "fake", "max_tokens": 5, "messages": [*USER, {"role": "assistant",
                                                             "content": "Sure:"}],
      "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
     "messages.1: assistant message prefill is not supported together with tools"),
    ({"model": "fake", "max_tokens": 5, "messages": USER,  # the fake engine cannot constrain
      "tools": [{"name": "f", "input_schema": {"type": "object"}}]},
     "tools: the fake engine cannot constrain its output to tool calls"),
    ({"model": "fake", "max_tokens": 100000, "messages": USER}, "max_tokens"),
    ({"model": "fake", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
     "messages.0.role: Input should be 'user' or 'assistant'"),
])
def test_bad_requests_answer_400_in_anthropics_shape(fake_server: ServerProcess,
                                                     body: dict[str, Any],
                                                     message: str) -> None:
    for stream in (False, True):
        r = httpx.post(fake_server.url + "/v1/messages", json={**body, "stream": stream},
                       timeout=10)
        assert anthropic_error(r, 400, "invalid_request_error").startswith(message)


def test_sdk_error_classes(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    with pytest.raises(anthropic.BadRequestError) as bad:
        c.messages.create(model="fake", max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "document", "source": {
                "type": "text", "media_type": "text/plain", "data": "x"}}]}])
    assert bad.value.status_code == 400
    assert "document" in bad.value.message and bad.value.body["type"] == "error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as missing:
        c.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=USER)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        c.messages.count_tokens(model="claude-sonnet-4-5", messages=USER)
    with pytest.raises(anthropic.BadRequestError):
        c.messages.count_tokens(model="fake", messages=[])


def test_not_json_wrong_methods_and_unknown_routes(fake_server: ServerProcess) -> None:
    url = fake_server.url
    for raw in (b"{nope", b"", b"[" * 100000, b'{"max_tokens": 1' + b"0" * 5000 + b"}"):
        r = httpx.post(url + "/v1/messages", content=raw,
                       headers={"content-type": "application/json"})
        assert "JSON" in anthropic_error(r, 400, "invalid_request_error")
    lone = b'{"model":"fake","max_tokens":5,"messages":[{"role":"user","content":"\\ud800"}]}'
    r = httpx.post(url + "/v1/messages", content=lone)
    assert "surrogate" in anthropic_error(r, 400, "invalid_request_error")
    r = httpx.post(url + "/v1/messages", content=json.dumps({"model": "fake"}))  # no type
    assert "messages: Field required" in anthropic_error(r, 400, "invalid_request_error")
    for method, path in (("GET", "/v1/messages"), ("GET", "/v1/messages/count_tokens")):
        r = httpx.request(method, url + path)
        anthropic_error(r, 405, "invalid_request_error")
        assert r.headers["allow"] == "POST"
    for path in ("/v1/messages/batches", "/v1/messages/msg_1/x"):
        anthropic_error(httpx.post(url + path, json={}), 404, "not_found_error")
    r = httpx.post(url + "/v1/audio/speech", json={})  # the OpenAI door's paths keep its shape
    assert r.status_code == 404 and set(r.json()) == {"error"}
    big = httpx.post(url + "/v1/messages", content=b"x" * ((1 << 20) + 1))
    assert "--max-body-bytes" in anthropic_error(big, 413, "request_too_large")
    assert httpx.get(url + "/health").status_code == 200  # and the server is unharmed


def test_failure_after_start_is_an_error_event(fake_server: ServerProcess) -> None:
    body: Any = {"model": "fake", "max_tokens": 50, "stream": True,
                 "messages": [{"role": "user", "content": "[[fail_after=3]][[pace_ms=5]]"}]}
    r = httpx.post(fake_server.url + "/v1/messages", json=body, timeout=10)
    assert r.status_code == 200
    got = events(r.text)
    assert got[0][0] == "message_start"
    assert got[-1] == ("error", {"type": "error", "error": {
        "type": "api_error", "message": "fake engine fault after 3 tokens"}})
    assert [n for n, _ in got].count("error") == 1 and "message_stop" not in r.text
    with pytest.raises(anthropic.APIStatusError) as info:  # the SDK raises it mid-stream
        with client(fake_server).messages.stream(model="fake", max_tokens=50,
                                                 messages=body["messages"]) as stream:
            for _ in stream.text_stream:
                pass
    assert info.value.body == {"type": "error", "error": {  # type: ignore[comparison-overlap]
        "type": "api_error", "message": "fake engine fault after 3 tokens"}}


def test_failure_before_first_token_is_http_500(fake_server: ServerProcess) -> None:
    messages: Any = [{"role": "user", "content": "[[fail_after=0]]"}]
    with pytest.raises(anthropic.InternalServerError) as info:
        client(fake_server).messages.create(model="fake", max_tokens=5, messages=messages)
    assert info.value.status_code == 500
    with pytest.raises(anthropic.InternalServerError):
        with client(fake_server).messages.stream(model="fake", max_tokens=5,
                                                 messages=messages) as stream:
            stream.get_final_message()


# ---- own servers: API key, pings, queue, disconnect ---------------------------------------


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--api-key", "s3cret"))) as server:
        yield server


def test_api_key_as_x_api_key_or_bearer(keyed_server: ServerProcess) -> None:
    url = keyed_server.url + "/v1/messages"
    body = {"model": "fake", "max_tokens": 5, "messages": USER}
    for headers in ({}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}):
        r = httpx.post(url, json=body, headers=headers)
        assert "x-api-key" in anthropic_error(r, 401, "authentication_error")
        anthropic_error(httpx.post(url + "/count_tokens", json=body, headers=headers), 401,
                        "authentication_error")
    for headers in ({"x-api-key": "s3cret"}, {"authorization": "Bearer s3cret"}):
        assert httpx.post(url, json=body, headers=headers).status_code == 200
    with pytest.raises(anthropic.AuthenticationError):
        client(keyed_server, "wrong").messages.create(model="fake", max_tokens=5,
                                                      messages=USER)
    ok = client(keyed_server, "s3cret").messages.create(model="fake", max_tokens=5,
                                                        messages=USER)
    assert ok.stop_reason == "max_tokens"
    auth = closed_after_test(anthropic.Anthropic(base_url=keyed_server.url, auth_token="s3cret",
                                                 max_retries=0))
    assert auth.messages.count_tokens(model="fake", messages=USER).input_tokens > 0
    # the OpenAI routes keep their own 401, and take x-api-key too
    r = httpx.get(keyed_server.url + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(keyed_server.url + "/v1/models",
                     headers={"x-api-key": "s3cret"}).status_code == 200


def test_idle_stream_sends_ping_events(live_server: Any) -> None:
    url = live_server("--engine", "fake", env={"TOKENPIPE_SSE_PING_INTERVAL_S": "0.05"})
    messages: Any = [{"role": "user", "content": "[[pace_ms=300]][[tokens=3]]"}]
    r = httpx.post(url + "/v1/messages", timeout=10, json={
        "model": "fake", "max_tokens": 10, "stream": True, "messages": messages})
    names = [n for n, _ in events(r.text)]
    first, last = names.index("content_block_delta"), len(names) - 1 - names[::-1].index(
        "content_block_delta")
    assert "ping" in names[first:last]  # between tokens, not only the opening one
    with client(url).messages.stream(model="fake", max_tokens=10,
                                     messages=messages) as stream:
        assert "".join(stream.text_stream) == "".join(
            d["delta"]["text"] for n, d in events(r.text) if n == "content_block_delta")


@pytest.fixture(scope="module")
def one_slot_server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--parallel", "1", "--max-queue", "1"))
                 ) as server:
        yield server


SLOW: Any = [{"role": "user", "content": "[[pace_ms=20]][[tokens=100000]]"}]


async def test_full_queue_is_529_and_disconnect_cancels(one_slot_server: ServerProcess) -> None:
    url = one_slot_server.url + "/v1/messages"
    async with httpx.AsyncClient(timeout=30) as http:
        before = metric((await http.get(one_slot_server.url + "/metrics")).text,
                        "tokenpipe_cancellations_total")
        a_body = {"model": "fake", "max_tokens": 4000, "stream": True, "messages": SLOW}
        async with http.stream("POST", url, json=a_body) as a:  # A takes the one slot
            a_lines = a.aiter_lines()
            deltas = 0
            while deltas < 2:
                deltas += (await anext(a_lines)) == "event: content_block_delta"
            b_body = {"model": "fake", "max_tokens": 20, "stream": True,
                      "messages": [{"role": "user", "content": "[[echo]] after A"}]}
            async with http.stream("POST", url, json=b_body) as b:  # B waits in the queue
                assert b.status_code == 200
                b_lines = b.aiter_lines()
                first = await anext(b_lines)
                while not first:
                    first = await anext(b_lines)
                assert first == ": queued position=1"
                c = await http.post(url, json={"model": "fake", "max_tokens": 5,
                                               "messages": USER})
                assert anthropic_error(c, 529, "overloaded_error")
                assert c.headers["retry-after"] == "1"
                with pytest.raises(anthropic.OverloadedError):
                    await asyncio.to_thread(client(one_slot_server).messages.create,
                                            model="fake", max_tokens=5, messages=USER)
                t0 = time.monotonic()
                await a.aclose()  # A's client leaves: its 4000 tokens (80 s) must stop now
                rest = "\n".join([line async for line in b_lines])
                waited = time.monotonic() - t0
        got = events(rest)
        assert "".join(d["delta"]["text"] for n, d in got if n == "content_block_delta") == (
            "after A")
        assert got[-1][0] == "message_stop"
        assert waited < 20, waited  # generous: B got A's slot long before A's 80 s
        after = metric((await http.get(one_slot_server.url + "/metrics")).text,
                       "tokenpipe_cancellations_total")
        assert after == before + 1  # A was cancelled, not left running

        # a whole (non-streamed) answer whose client leaves is cancelled too
        d = asyncio.create_task(http.post(url, json={**a_body, "stream": False}))
        deadline = time.monotonic() + 10
        while 'tokenpipe_generations_active{model="fake"} 1.0' not in (
                await http.get(one_slot_server.url + "/metrics")).text:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        d.cancel()
        with pytest.raises(asyncio.CancelledError):
            await d
        while metric((await http.get(one_slot_server.url + "/metrics")).text,
                     "tokenpipe_cancellations_total") < after + 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)


# ---- the real model ------------------------------------------------------------------------


@pytest.mark.model
def test_real_greedy_same_text_as_chat_completions(model_server: ServerProcess) -> None:
    oai = oai_client(model_server)
    model = oai.models.list().data[0].id
    system, question = "You answer in one short sentence.", "Name three colours."
    chat = oai.chat.completions.create(
        model=model, temperature=0, max_tokens=24,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    c = client(model_server)
    kwargs: Any = {"model": model, "max_tokens": 24, "system": system,
                   "messages": [{"role": "user", "content": question}],
                   "extra_body": {"temperature": 0}}
    whole = c.messages.create(**kwargs)
    with c.messages.stream(**kwargs) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert chat.choices[0].message.content
    assert whole.content[0].text == streamed == chat.choices[0].message.content  # type: ignore[union-attr]
    assert chat.usage is not None
    for usage in (whole.usage, final.usage):
        assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == (
            chat.usage.prompt_tokens)
        assert usage.output_tokens == chat.usage.completion_tokens
    counted = c.messages.count_tokens(model=model, system=system, messages=kwargs["messages"])
    assert counted.input_tokens == chat.usage.prompt_tokens
    reason = {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]
    assert whole.stop_reason == final.stop_reason == reason


@pytest.mark.model
def test_real_prefill_continues_the_answer_as_chat_completions_does(
        model_server: ServerProcess) -> None:
    """A last assistant message is an answer already begun: the door streams only what
    follows it, the same text the OpenAI door gives for the same prefill; count_tokens
    counts that prompt too."""
    oai = oai_client(model_server)
    model = oai.models.list().data[0].id
    turns: Any = [{"role": "user", "content": "Name three colours."},
                  {"role": "assistant", "content": "The three colours are"}]
    chat = oai.chat.completions.create(model=model, temperature=0, max_tokens=16,
                                       messages=turns)
    c = client(model_server)
    kwargs: Any = {"model": model, "max_tokens": 16, "messages": turns,
                   "extra_body": {"temperature": 0}}
    whole = c.messages.create(**kwargs)
    with c.messages.stream(**kwargs) as stream:
        streamed = "".join(stream.text_stream)
    text = whole.content[0].text  # type: ignore[union-attr]
    assert text and text == streamed == chat.choices[0].message.content
    assert not text.startswith("The three colours are")  # only the continuation
    counted = c.messages.count_tokens(model=model, messages=turns)
    assert chat.usage is not None and counted.input_tokens == chat.usage.prompt_tokens
