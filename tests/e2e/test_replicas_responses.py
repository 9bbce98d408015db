"""Stored Responses shared by replicas (`--state redis://...`): two `tokenpipe serve`
processes on the fake engine and Debian's redis-server on a free port, driven with the
official `openai` client. A conversation stored on one replica continues on the other
(previous_response_id), is retrieved, listed and deleted there; a background response
started on one streams, is cancelled and deleted on the other; retention (max age, max
count) leaves no key behind; Redis killed while serving makes a store the door's 500 in
OpenAI's shape and /health degraded, and the replica recovers by itself when it is back."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test, running
from tests.e2e.redis_server import RedisServer
from tokenpipe.engines.fake import fake_tokenize

pytestmark = pytest.mark.e2e
PACED = "[[pace_ms=15]][[tokens=60]]"
SLOW = "[[pace_ms=50]][[tokens=400]]"  # 20 s: it is cancelled or deleted long before


def replica(redis_server: RedisServer, *extra: str,
            env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess(("--engine", "fake", "--state", redis_server.url,
                          "--resume-grace-s", "3", *extra), env)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running(RedisServer()) as server:
        yield server


@pytest.fixture(scope="module")
def replicas(redis_server: RedisServer) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """The first runs one generation at a time: a second one waits in its queue."""
    with running(replica(redis_server, "--parallel", "1")) as a, running(
            replica(redis_server)) as b:
        yield a, b


def client(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="x",
                                           max_retries=0))


def rendered_tokens(*turns: tuple[str, str]) -> int:
    """The fake engine's prompt tokens for these turns (its template, its tokenizer)."""
    text = "".join(f"<|{role}|>{content}<|end|>" for role, content in turns) + "<|assistant|>"
    return len(fake_tokenize(text.encode()))


def test_a_conversation_continues_on_another_replica(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = (client(s) for s in replicas)
    first = a.responses.create(model="fake", input="[[echo]] one")
    second = b.responses.create(model="fake", input="[[echo]] two",
                                previous_response_id=first.id)
    assert second.output_text == "two"
    assert second.usage is not None and second.usage.input_tokens == rendered_tokens(
        ("user", "[[echo]] one"), ("assistant", "one"), ("user", "[[echo]] two"))
    third = a.responses.create(model="fake", input="[[echo]] three",
                               previous_response_id=second.id)  # and back on the first
    assert third.usage is not None and third.usage.input_tokens == rendered_tokens(
        ("user", "[[echo]] one"), ("assistant", "one"), ("user", "[[echo]] two"),
        ("assistant", "two"), ("user", "[[echo]] three"))
    assert b.responses.retrieve(first.id).model_dump() == first.model_dump()
    items = b.responses.input_items.list(first.id)
    assert [i.content[0].text for i in items.data] == ["[[echo]] one"]  # type: ignore[union-attr]
    assert b.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.create(model="fake", input="x", previous_response_id=first.id)


def test_a_background_response_streams_on_another_replica(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = (client(s) for s in replicas)
    uninterrupted = a.responses.create(model="fake", input=PACED, store=False)
    bg = a.responses.create(model="fake", input=PACED, background=True)
    # at once, from its first event: the other replica waits for its stream to begin
    whole = list(b.responses.retrieve(bg.id, stream=True))
    numbers = [e.sequence_number for e in whole]
    assert numbers == list(range(len(numbers)))
    assert whole[0].type == "response.created" and whole[-1].type == "response.completed"
    assert whole[-1].response.output_text == uninterrupted.output_text

    first: list[Any] = []  # dropped on one replica, resumed on the other
    with a.responses.create(model="fake", input=PACED, background=True,
                            stream=True) as stream:
        for event in stream:
            first.append(event)
            if sum(e.type == "response.output_text.delta" for e in first) == 5:
                break
    response_id, seen = first[0].response.id, first[-1].sequence_number
    running_there = b.responses.retrieve(response_id)
    assert running_there.status in ("queued", "in_progress")
    items = b.responses.input_items.list(response_id)
    assert [i.content[0].text for i in items.data] == [PACED]  # type: ignore[union-attr]
    rest = list(b.responses.retrieve(response_id, stream=True, starting_after=seen))
    numbers = [e.sequence_number for e in first + rest]
    assert numbers == list(range(len(numbers)))  # nothing lost, nothing repeated
    text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
    assert text == uninterrupted.output_text == rest[-1].response.output_text
    stored = b.responses.retrieve(response_id)  # stored by the replica that ran it
    assert stored.status == "completed" and stored.output_text == text


def test_a_queued_background_response_streams_elsewhere_once_it_begins(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = (client(s) for s in replicas)
    with a.responses.create(model="fake", input=PACED, stream=True) as busy:
        next(iter(busy))  # the first replica's one slot is taken for about a second
        bg = a.responses.create(model="fake", input="[[echo]] was queued", background=True)
        assert bg.status == "queued"
        assert b.responses.retrieve(bg.id).status == "queued"  # not begun: its record
        with pytest.raises(openai.BadRequestError, match="still in progress"):
            b.responses.create(model="fake", input="x", previous_response_id=bg.id)
        started = time.monotonic()
        events = list(b.responses.retrieve(bg.id, stream=True))
    waited = time.monotonic() - started
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output_text == "was queued"
    print(f"a queued background response followed on the other replica: its events "
          f"after {waited:.2f} s")


def test_a_background_response_is_cancelled_and_deleted_on_another_replica(
        replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = (client(s) for s in replicas)
    cancelled = a.responses.create(model="fake", input=SLOW, background=True)
    started = time.monotonic()
    assert b.responses.cancel(cancelled.id).status == "cancelled"
    print(f"cancel on the other replica: answered after "
          f"{(time.monotonic() - started) * 1000:.0f} ms")
    deadline = time.monotonic() + 10
    while (got := a.responses.retrieve(cancelled.id)).status == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert got.status == "cancelled"

    deleted = a.responses.create(model="fake", input=SLOW, background=True)
    assert b.responses.delete(deleted.id) is None
    deadline = time.monotonic() + 10
    while True:  # it runs on where it began until the cancel arrives, then is not stored
        try:
            a.responses.retrieve(deleted.id)
        except openai.NotFoundError:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(deleted.id)


def test_retention_leaves_no_key_behind(redis_server: RedisServer) -> None:
    """A short max age (the key expiry) and a count cap (the bounded index): the oldest go
    as the newest are stored, and nothing is left once the newest are past their age."""
    max_age_s = 3
    env = {"TOKENPIPE_RESPONSES_MAX_AGE_S": str(max_age_s),
           "TOKENPIPE_RESPONSES_MAX_COUNT": "3"}
    with running(replica(redis_server, "--state-prefix", "short", env=env)) as server:
        c = client(server)
        ids = [c.responses.create(model="fake", input=f"[[echo]] {n}").id for n in range(5)]
        kept = []
        for response_id in ids:
            try:
                kept.append(c.responses.retrieve(response_id).id)
            except openai.NotFoundError:
                pass
        assert kept == ids[2:]
        with redis_server.client() as r:
            rows = sorted(k.decode() for k in r.keys("short:resp:row:*"))
            assert rows == sorted(f"short:resp:row:{i}" for i in ids[2:])
            deadline = time.monotonic() + max_age_s + 5
            while keys := r.keys("short:*"):
                assert time.monotonic() < deadline, [(k, r.pttl(k)) for k in keys]
                time.sleep(0.1)
        waited = time.monotonic() - deadline + max_age_s + 5
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(ids[-1])
    print(f"5 stored under a cap of 3: 3 kept; no key left {waited:.1f} s later "
          f"(max age {max_age_s} s)")


def health(server: ServerProcess) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(server.url + "/health", timeout=10).json()
    return body


def test_redis_lost_while_serving_is_a_500_then_recovers() -> None:
    with running(RedisServer()) as redis_server, running(replica(redis_server)) as server:
        c = client(server)
        before = c.responses.create(model="fake", input="[[echo]] before")
        redis_server.stop(signal.SIGKILL)
        with pytest.raises(openai.InternalServerError) as caught:
            c.responses.create(model="fake", input="[[echo]] lost")
        error = caught.value.body
        assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
        assert "could not store response" in error["message"], error
        assert "state store unreachable" in error["message"], error
        status = health(server)
        assert status["status"] == "degraded" and "unreachable" in status["store"], status
        with pytest.raises(openai.InternalServerError):
            c.responses.retrieve(before.id)  # reads fail alike
        kinds = [e.type for e in c.responses.create(model="fake", input="[[echo]] x",
                                                     stream=True)]
        assert kinds[-2:] == ["error", "response.failed"], kinds
        # not stored: nothing to continue (its answer still came)
        assert c.responses.create(model="fake", input="[[echo]] y",
                                  store=False).output_text == "y"
        with running(RedisServer(redis_server.port)):
            deadline = time.monotonic() + 10  # the replica probes it every second
            while (status := health(server)).get("store") or status.get("state"):
                assert time.monotonic() < deadline, status
                time.sleep(0.1)
            assert status["status"] == "ok", status
            after = c.responses.create(model="fake", input="[[echo]] after")
            assert c.responses.retrieve(after.id).output_text == "after"
        assert server.proc.poll() is None
