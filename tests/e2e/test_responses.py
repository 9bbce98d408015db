"""The OpenAI Responses door (docs/protocol.md, "OpenAI Responses HTTP") over real servers
on the fake engine, with the official `openai` SDK as the client: shapes and numbered
events, instructions and previous_response_id, store / retrieve / delete / input_items,
a restart between store and retrieve, background responses polled, resumed after a drop
and cancelled, errors in OpenAI's shape, a failure mid-stream, cancel on disconnect."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.conftest import ServerProcess, closed_after_test, running
from tokenpipe.engines.fake import SCRIPT, fake_tokenize

pytestmark = pytest.mark.e2e
EVENT = TypeAdapter(ResponseStreamEvent)


def client(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0))


def sse(text: str) -> list[dict[str, Any]]:
    """Every event's data, checking its `event:` line names its type."""
    out = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if lines:
            event = json.loads(lines[1].removeprefix("data: "))
            assert lines[0] == "event: " + event["type"]
            out.append(event)
    return out


def metric(text: str, name: str) -> float:
    """A counter from /metrics, summed over its labels (the `api`, ...)."""
    return sum(map(float, re.findall(re.escape(name) + r"(?:\{[^}]*\})? ([0-9.e+-]+)", text)))


def rendered_tokens(*turns: tuple[str, str]) -> int:
    """The fake engine's prompt tokens for these turns (its template, its tokenizer)."""
    text = "".join(f"<|{role}|>{content}<|end|>" for role, content in turns) + "<|assistant|>"
    return len(fake_tokenize(text.encode()))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    db = tmp_path_factory.mktemp("responses") / "r.sqlite3"
    with running(ServerProcess(("--engine", "fake", "--responses-db", str(db)))) as s:
        yield s


# ---- shapes --------------------------------------------------------------------------------


def test_create_whole(server: ServerProcess) -> None:
    r = httpx.post(server.url + "/v1/responses", json={"model": "fake", "input": "hello"},
                   timeout=10)
    assert r.status_code == 200
    body = Response.model_validate(r.json())  # strictly the SDK's type
    assert body.id.startswith("resp_") and body.object == "response"
    assert body.status == "completed" and body.output_text == SCRIPT
    assert body.model == "fake" and body.store is not False  # type: ignore[attr-defined]
    assert body.usage is not None and body.usage.output_tokens > 0
    assert body.usage.total_tokens == body.usage.input_tokens + body.usage.output_tokens
    assert body.usage.input_tokens == rendered_tokens(("user", "hello"))
    assert body.temperature == 1.0 and body.tools == [] and body.truncation == "disabled"


def test_stream_events_in_order_numbered_and_typed(server: ServerProcess) -> None:
    r = httpx.post(server.url + "/v1/responses", timeout=10, json={
        "model": "fake", "input": "[[echo]] a b c d", "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    got = sse(r.text)
    names = [e["type"] for e in got]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added",
                     *["response.output_text.delta"] * (len(names) - 8),
                     "response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.completed"]
    assert len(names) > 9  # token by token
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    for event in got:
        EVENT.validate_python(event)
    text = "".join(e["delta"] for e in got if e["type"] == "response.output_text.delta")
    assert text == "a b c d" == got[-1]["response"]["output"][0]["content"][0]["text"]
    stored = client(server).responses.retrieve(got[0]["response"]["id"])
    assert stored.model_dump(exclude_unset=True) == Response.model_validate(
        got[-1]["response"]).model_dump(exclude_unset=True)


def test_sdk_stream_helpers_and_instructions(server: ServerProcess) -> None:
    c = client(server)
    with c.responses.stream(model="fake", input="[[echo]] one two",
                            instructions="You are terse.") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "one two"
    assert final.instructions == "You are terse."
    assert final.usage is not None and final.usage.input_tokens == rendered_tokens(
        ("system", "You are terse."), ("user", "[[echo]] one two"))
    events = list(c.responses.create(model="fake", input="[[echo]] x y", stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "x y"


def test_previous_response_id_continues_without_its_instructions(server: ServerProcess) -> None:
    c = client(server)
    first = c.responses.create(model="fake", input="[[echo]] one", instructions="sys")
    second = c.responses.create(model="fake", input=[{"role": "user", "content": "[[echo]] two"}],
                                previous_response_id=first.id)
    assert second.previous_response_id == first.id and second.output_text == "two"
    assert second.usage is not None and second.usage.input_tokens == rendered_tokens(
        ("user", "[[echo]] one"), ("assistant", "one"), ("user", "[[echo]] two"))
    third = c.responses.create(model="fake", input="[[echo]] three", instructions="new",
                               previous_response_id=second.id)
    assert third.usage is not None and third.usage.input_tokens == rendered_tokens(
        ("system", "new"), ("user", "[[echo]] one"), ("assistant", "one"),
        ("user", "[[echo]] two"), ("assistant", "two"), ("user", "[[echo]] three"))
    items = c.responses.input_items.list(third.id)
    assert [i.content[0].text for i in items.data] == ["[[echo]] three"]  # type: ignore[union-attr]


def test_store_retrieve_delete_and_input_items(server: ServerProcess) -> None:
    c = client(server)
    r = c.responses.create(model="fake", metadata={"k": "v"}, user="u1", input=[
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ])
    got = c.responses.retrieve(r.id)
    assert got.output_text == r.output_text == SCRIPT
    assert got.metadata == {"k": "v"} and got.user == "u1"  # type: ignore[attr-defined]
    desc = c.responses.input_items.list(r.id)
    assert [i.role for i in desc.data] == ["user", "developer"]  # type: ignore[union-attr]
    asc = c.responses.input_items.list(r.id, order="asc", limit=1)
    assert [i.role for i in asc.data] == ["developer"] and asc.has_more  # type: ignore[union-attr]
    nxt = c.responses.input_items.list(r.id, order="asc", after=asc.data[0].id)
    assert [i.role for i in nxt.data] == ["user"]  # type: ignore[union-attr]
    c.responses.delete(r.id)
    for call in (lambda: c.responses.retrieve(r.id), lambda: c.responses.delete(r.id),
                 lambda: c.responses.input_items.list(r.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    unstored = c.responses.create(model="fake", input="hi", store=False)
    with pytest.raises(openai.NotFoundError) as info:
        c.responses.retrieve(unstored.id)
    assert info.value.body == {"message": f"Response with id '{unstored.id}' not found.",
                               "type": "invalid_request_error", "param": None, "code": None}


def test_a_restart_loses_no_stored_response(tmp_path: Path) -> None:
    db = str(tmp_path / "kept.sqlite3")
    with running(ServerProcess(("--engine", "fake", "--responses-db", db))) as first:
        r = client(first).responses.create(model="fake", input="[[echo]] remember me")
        bg = client(first).responses.create(model="fake", input="[[echo]] in the back",
                                            background=True)
        deadline = time.monotonic() + 10
        while client(first).responses.retrieve(bg.id).status != "completed":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    with running(ServerProcess(("--engine", "fake", "--responses-db", db))) as second:
        c = client(second)
        got = c.responses.retrieve(r.id)
        assert got.model_dump() == r.model_dump()
        more = c.responses.create(model="fake", input="[[echo]] next",
                                  previous_response_id=r.id)
        assert more.usage is not None and more.usage.input_tokens == rendered_tokens(
            ("user", "[[echo]] remember me"), ("assistant", "remember me"),
            ("user", "[[echo]] next"))
        events = list(c.responses.retrieve(bg.id, stream=True, starting_after=3))
        assert events[0].sequence_number == 4 and events[-1].type == "response.completed"
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
            "in the back")


def test_max_output_tokens_is_incomplete(server: ServerProcess) -> None:
    c = client(server)
    whole = c.responses.create(model="fake", input="hi", max_output_tokens=5)
    assert whole.status == "incomplete" and whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage is not None and whole.usage.output_tokens == 5
    events = list(c.responses.create(model="fake", input="hi", max_output_tokens=5,
                                     stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output_text == whole.output_text


# ---- background ---------------------------------------------------------------------------

PACED = "[[pace_ms=15]][[tokens=60]]"


def test_background_stream_dropped_and_resumed_loses_nothing(server: ServerProcess) -> None:
    c = client(server)
    uninterrupted = c.responses.create(model="fake", input=PACED)
    first: list[Any] = []
    stream = c.responses.create(model="fake", input=PACED, background=True, stream=True)
    for event in stream:
        first.append(event)
        if sum(e.type == "response.output_text.delta" for e in first) == 5:
            break
    stream.close()  # the client drops; the generation runs on
    response_id = first[0].response.id
    assert first[0].response.status == "queued" and first[0].response.background
    time.sleep(0.2)  # it keeps running while nobody listens
    seen = first[-1].sequence_number
    rest = list(c.responses.retrieve(response_id, stream=True, starting_after=seen))
    numbers = [e.sequence_number for e in first + rest]
    assert numbers == list(range(len(numbers)))  # nothing lost, nothing repeated
    text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
    assert text == uninterrupted.output_text == rest[-1].response.output_text
    assert rest[-1].type == "response.completed"
    # a second resume from the start, now from the store, says the same again
    again = list(c.responses.retrieve(response_id, stream=True))
    assert [e.model_dump() for e in again] == [e.model_dump() for e in first + rest]
    with c.responses.stream(response_id=response_id, starting_after=seen) as helper:
        assert [e.sequence_number for e in helper] == [e.sequence_number for e in rest]
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.retrieve(response_id, stream=True, starting_after=numbers[-1] + 1)
    assert info.value.body["param"] == "starting_after"  # type: ignore[index]
    # ASCII digits only: int() would take a space, underscores and other scripts' digits
    for odd in (" 5", "5 ", "1_0", "\u0665", "+5", "0x5"):
        r = httpx.get(f"{server.url}/v1/responses/{response_id}",
                      params={"stream": "true", "starting_after": odd})
        assert r.status_code == 400 and r.json()["error"]["param"] == "starting_after", odd
    r = httpx.get(f"{server.url}/v1/responses/{response_id}?stream=true&starting_after=-1")
    assert r.status_code == 200


async def test_several_clients_follow_one_background_response(server: ServerProcess) -> None:
    c = client(server)
    r = c.responses.create(model="fake", input=PACED, background=True)
    url = f"{server.url}/v1/responses/{r.id}?stream=true"
    async with httpx.AsyncClient(timeout=30) as http:
        a, b = await asyncio.gather(http.get(url), http.get(url + "&starting_after=3"))
    got_a, got_b = sse(a.text), sse(b.text)
    assert [e["sequence_number"] for e in got_a] == list(range(len(got_a)))
    assert got_b == got_a[4:]  # the same events, each stream from where it asked
    assert got_a[-1]["response"]["output"][0]["content"][0]["text"] == (
        c.responses.create(model="fake", input=PACED).output_text)


def test_background_is_polled_then_cancelled(server: ServerProcess) -> None:
    c = client(server)
    r = c.responses.create(model="fake", input="[[pace_ms=20]][[tokens=100000]]",
                           background=True, max_output_tokens=4000)
    assert r.status in ("queued", "in_progress") and r.background
    deadline = time.monotonic() + 10
    while not (polled := c.responses.retrieve(r.id)).output_text:
        assert polled.status in ("queued", "in_progress") and time.monotonic() < deadline
        time.sleep(0.05)
    assert polled.status == "in_progress"
    cancelled = c.responses.cancel(r.id)
    assert cancelled.status == "cancelled" and cancelled.output_text.startswith(
        polled.output_text)
    assert c.responses.retrieve(r.id).model_dump() == cancelled.model_dump()
    events = list(c.responses.retrieve(r.id, stream=True, starting_after=3))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.status == "cancelled"
    assert c.responses.cancel(r.id).status == "cancelled"  # again: as it ended
    plain = c.responses.create(model="fake", input="hi")
    with pytest.raises(openai.BadRequestError):
        c.responses.cancel(plain.id)
    with pytest.raises(openai.BadRequestError):
        c.responses.retrieve(plain.id, stream=True)
    with pytest.raises(openai.NotFoundError):
        c.responses.cancel("resp_nope")


# ---- errors -------------------------------------------------------------------------------


def openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "fake"}, "input"),
    ({"model": "fake", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"model": "fake", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input[0].content[0]"),
    ({"model": "fake", "input": "hi", "tools": [{"type": "function", "name": "f",
                                                  "parameters": {}}]}, "tools"),
    ({"model": "fake", "input": "hi", "include": ["message.output_text.logprobs"]}, "include"),
    ({"model": "fake", "input": "hi", "reasoning": {"effort": "high", "summary": "auto"}},
     "reasoning.summary"),
    ({"model": "fake", "input": "hi", "background": True, "store": False}, "background"),
    ({"model": "fake", "input": "hi", "max_output_tokens": 100000}, "max_output_tokens"),
    ({"model": "fake", "input": "hi", "previous_response_id": "resp_x"},
     "previous_response_id"),
    ({"model": "fake", "input": [{"type": "function_call_output", "call_id": "call_x",
                                  "output": "21"}]}, "input"),  # answers no call
    ({"model": "fake", "input": "hi", "tools": [{"type": "code_interpreter"}]}, "tools[0]"),
])
def test_bad_requests_answer_in_openais_shape(server: ServerProcess, body: dict[str, Any],
                                              param: str) -> None:
    for stream in (False, True):
        r = httpx.post(server.url + "/v1/responses", json={**body, "stream": stream},
                       timeout=10)
        status = 404 if param == "previous_response_id" else 400
        assert openai_error(r, status)["param"] == param


def test_not_json_unknown_model_and_sdk_error_classes(server: ServerProcess) -> None:
    url = server.url + "/v1/responses"
    for raw in (b"{nope", b"", b"[" * 100000, b"[1, 2]"):
        assert openai_error(httpx.post(url, content=raw), 400)["type"] == (
            "invalid_request_error")
    missing = openai_error(httpx.post(url, json={"model": "gpt-5", "input": "hi"}), 404)
    assert missing["code"] == "model_not_found"
    big = httpx.post(url, content=b"x" * ((1 << 20) + 1))
    assert big.status_code == 413 and set(big.json()) == {"error"}
    with pytest.raises(openai.BadRequestError):
        client(server).responses.create(model="fake", input="hi", truncation="auto")
    for path in ("/v1/responses/resp_1", "/v1/responses/resp_1/input_items"):
        assert openai_error(httpx.get(server.url + path), 404)["message"] == (
            "Response with id 'resp_1' not found.")
    r = httpx.get(server.url + "/v1/responses/resp_1?stream=maybe")
    assert openai_error(r, 400)["param"] == "stream"
    for method, path, allow in (("GET", "", "POST"), ("PUT", "/resp_1", "GET, DELETE"),
                                ("GET", "/resp_1/cancel", "POST"),
                                ("POST", "/resp_1/input_items", "GET")):
        r = httpx.request(method, server.url + "/v1/responses" + path)
        openai_error(r, 405)
        assert r.headers["allow"] == allow
    assert openai_error(httpx.get(server.url + "/v1/responses/a/b/c"), 404)
    assert httpx.get(server.url + "/health").status_code == 200  # and the server is unharmed


def test_failure_mid_stream_is_an_error_event_then_failed(server: ServerProcess) -> None:
    body = {"model": "fake", "input": "[[fail_after=3]][[pace_ms=5]]", "stream": True}
    got = sse(httpx.post(server.url + "/v1/responses", json=body, timeout=10).text)
    assert got[0]["type"] == "response.created"
    assert [e["type"] for e in got[-2:]] == ["error", "response.failed"]
    assert got[-2]["code"] == "engine_error"
    assert got[-2]["message"] == "fake engine fault after 3 tokens"
    failed = got[-1]["response"]
    assert failed["status"] == "failed" and failed["error"] == {
        "code": "server_error", "message": "fake engine fault after 3 tokens"}
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    events = list(client(server).responses.create(model="fake", input=body["input"],
                                                  stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    with pytest.raises(openai.InternalServerError):  # before the first token: HTTP 500
        client(server).responses.create(model="fake", input="[[fail_after=0]]")


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    db = tmp_path_factory.mktemp("one") / "r.sqlite3"
    with running(ServerProcess(("--engine", "fake", "--parallel", "1", "--max-queue", "1",
                                "--responses-db", str(db)))) as s:
        yield s


async def test_full_queue_is_429_and_disconnect_cancels(one_slot: ServerProcess) -> None:
    url = one_slot.url + "/v1/responses"
    slow = {"model": "fake", "input": "[[pace_ms=20]][[tokens=100000]]",
            "max_output_tokens": 4000, "stream": True}
    async with httpx.AsyncClient(timeout=30) as http:
        before = metric((await http.get(one_slot.url + "/metrics")).text,
                        "tokenpipe_cancellations_total")
        async with http.stream("POST", url, json=slow) as a:  # A takes the one slot
            lines = a.aiter_lines()
            while (await anext(lines)) != "event: response.output_text.delta":
                pass
            queued = asyncio.create_task(http.post(url, json={"model": "fake", "input": "q"}))
            deadline = time.monotonic() + 10
            while 'tokenpipe_generations_queued{model="fake"} 1.0' not in (
                    await http.get(one_slot.url + "/metrics")).text:  # B waits in the queue
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            c = await http.post(url, json={"model": "fake", "input": "hi"})  # C: no place
            assert openai_error(c, 429)["type"] == "rate_limit_error"
            assert c.headers["retry-after"] == "1"
            with pytest.raises(openai.RateLimitError):
                await asyncio.to_thread(client(one_slot).responses.create, model="fake",
                                        input="hi")
        # A's client left: its 80 s of tokens stop now, and B gets the slot
        b = await queued
        assert b.status_code == 200 and b.json()["status"] == "completed"
        while metric((await http.get(one_slot.url + "/metrics")).text,
                     "tokenpipe_cancellations_total") < before + 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
