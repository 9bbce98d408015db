"""NdjsonResponse (server/ollama/ndjson_response.py) driven through raw ASGI receive/send
(STYLE.md item 11): lines as produced, failures before and after the first token, whole
answers, the disconnect that cancels, and the lines a waiting request hears."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.unit.protocol.test_openai import Asgi
from tokenpipe.engines.base import PreparedRequest
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.protocol.ollama.responses import Answer
from tokenpipe.scheduler import Scheduler
from tokenpipe.server.ollama.ndjson_response import NdjsonResponse
from tokenpipe.session import Finished, GenerationSession
from tokenpipe.types import FinishReason, GenerationRequest, Message, SamplingParams


@pytest.fixture
def scheduler() -> Scheduler:
    return Scheduler(FakeEngine())


async def serve(scheduler: Scheduler, text: str, *, stream: bool = True, chat: bool = True,
                max_tokens: int | None = None) -> tuple[Asgi, Any]:
    session = scheduler.submit(GenerationRequest(
        messages=(Message("user", text),), params=SamplingParams(max_tokens=max_tokens)))
    asgi = Asgi()
    response = NdjsonResponse(session, Answer("fake:latest", chat=chat), stream=stream)
    await asyncio.wait_for(response({"type": "http"}, asgi.receive, asgi.send), 30)
    return asgi, session


def lines(asgi: Asgi) -> list[Any]:
    body = asgi.body.decode()
    assert body.endswith("\n")
    return [json.loads(ln) for ln in body.split("\n")[:-1]]


async def test_streamed_chat_is_ndjson_ending_with_done(scheduler: Scheduler) -> None:
    asgi, session = await serve(scheduler, "[[echo]] héllo wörld 🎉")
    assert asgi.start["status"] == 200
    assert dict(asgi.start["headers"])[b"content-type"] == b"application/x-ndjson"
    objs = lines(asgi)
    assert all(o["done"] is False for o in objs[:-1]) and objs[-1]["done"] is True
    assert "".join(o["message"]["content"] for o in objs) == "héllo wörld 🎉"
    assert objs[-1]["message"]["content"] == "" and objs[-1]["done_reason"] == "stop"
    assert objs[-1]["eval_count"] == session.completion_tokens
    assert objs[-1]["prompt_eval_count"] == session.prompt_tokens
    assert {o["model"] for o in objs} == {"fake:latest"}
    assert asgi.sent[-1][1]["more_body"] is False


async def test_whole_answer_equals_the_stream(scheduler: Scheduler) -> None:
    whole, _ = await serve(scheduler, "[[tokens=30]]", stream=False, chat=False, max_tokens=20)
    streamed, _ = await serve(scheduler, "[[tokens=30]]", chat=False, max_tokens=20)
    answer = json.loads(whole.body)
    assert dict(whole.start["headers"])[b"content-type"] == b"application/json; charset=utf-8"
    objs = lines(streamed)
    assert answer["response"] == "".join(o["response"] for o in objs)
    assert answer["done_reason"] == objs[-1]["done_reason"] == "length"
    assert answer["eval_count"] == objs[-1]["eval_count"] == 20


async def test_failure_before_the_first_token_is_a_status(scheduler: Scheduler) -> None:
    for stream in (True, False):
        asgi, _ = await serve(scheduler, "[[fail_after=0]]", stream=stream)
        assert asgi.start["status"] == 500
        assert json.loads(asgi.body) == {"error": "fake engine fault after 0 tokens"}


async def test_failure_after_the_first_token_is_a_last_error_line(scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[fail_after=3]][[pace_ms=5]]")
    objs = lines(asgi)
    assert asgi.start["status"] == 200
    assert objs[-1] == {"error": "fake engine fault after 3 tokens"}
    assert all("error" not in o and o["done"] is False for o in objs[:-1])
    assert asgi.sent[-1][1]["more_body"] is False


async def test_lines_leave_as_they_are_produced(scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[pace_ms=40]][[tokens=6]]")
    sends = [t for t, m in asgi.sent[1:] if m.get("body")]
    assert len(sends) >= 5  # one write per token, not one at the end
    assert sends[-1] - sends[0] >= 0.5 * 0.04 * 5


async def test_disconnect_cancels_within_one_step(scheduler: Scheduler) -> None:
    session = scheduler.submit(GenerationRequest(
        prompt="[[pace_ms=10]][[tokens=100000]]", params=SamplingParams(max_tokens=5000)))
    asgi = Asgi()
    seen: list[int] = []

    def on_send(message: dict[str, Any]) -> None:
        if message.get("body") and not seen:
            seen.append(session.completion_tokens)
            asgi.disconnect()  # the client leaves right after its first line

    asgi.on_send = on_send
    response = NdjsonResponse(session, Answer("fake", chat=False), stream=True)
    await asyncio.wait_for(response({"type": "http"}, asgi.receive, asgi.send), 5)
    await asyncio.wait_for(session.done.wait(), 5)
    assert isinstance(session.final, Finished)
    assert session.final.reason is FinishReason.CANCELLED
    assert session.completion_tokens <= seen[0] + 1  # at most the step already under way
    assert scheduler.running == 0


async def test_disconnect_cancels_a_whole_answer_too(scheduler: Scheduler) -> None:
    session = scheduler.submit(GenerationRequest(
        prompt="[[pace_ms=10]][[tokens=100000]]", params=SamplingParams(max_tokens=5000)))
    asgi = Asgi()
    response = NdjsonResponse(session, Answer("fake", chat=True), stream=False)
    task = asyncio.create_task(response({"type": "http"}, asgi.receive, asgi.send))
    while session.completion_tokens < 3:  # noqa: ASYNC110 - the session has no such event
        await asyncio.sleep(0.005)
    asgi.disconnect()
    await asyncio.wait_for(task, 5)
    assert isinstance(session.final, Finished)
    assert session.final.reason is FinishReason.CANCELLED
    assert asgi.sent == [] and scheduler.running == 0


async def test_waiting_and_prefill_are_lines_with_empty_text_and_a_field_of_their_own(
) -> None:
    request = GenerationRequest(messages=(Message("user", "x"),))
    session = GenerationSession.loading_model("fake:latest")
    session.bind_cancel(lambda: session.finish(FinishReason.CANCELLED))
    asgi = Asgi()
    response = NdjsonResponse(session, Answer("fake:latest", chat=True), stream=True)
    task = asyncio.ensure_future(response({"type": "http"}, asgi.receive, asgi.send))
    await asyncio.sleep(0.01)
    session.attach(PreparedRequest(request, "x", [1] * 1000, 8), "fake:latest")
    session.set_position(2)
    await asyncio.sleep(0.01)
    session.mark_started(1000)
    session.set_progress(512, 1000)
    await asyncio.sleep(0.01)
    session.add_text("hi", 1)
    session.finish(FinishReason.STOP)
    await asyncio.wait_for(task, 5)
    objs = lines(asgi)
    assert asgi.start["status"] == 200
    assert [{k: o[k] for k in ("loading_model", "queue_position", "prefill") if k in o}
            for o in objs[:3]] == [{"loading_model": True}, {"queue_position": 2},
                                   {"prefill": {"done": 512, "total": 1000}}]
    assert all(o["message"] == {"role": "assistant", "content": ""} and o["done"] is False
               for o in objs[:3])
    assert [o["message"]["content"] for o in objs[3:]] == ["hi", ""] and objs[-1]["done"]
