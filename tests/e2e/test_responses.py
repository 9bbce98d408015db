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

from tests.conftest import ServerProcess, running
from tokenpipe.engines.fake import SCRIPT, fake_tokenize

pytestmark = pytest.mark.e2e
EVENT = TypeAdapter(ResponseStreamEvent)


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


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
    found = re.search(re.escape(name) + r" ([0-9.e+-]+)", text)
    return float(found.group(1)) if found else 0.0


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
