"""Anthropic's error map and event builders, and SessionResponse driven through raw ASGI
receive/send (STYLE.md item 11): event order, pings, queue, failures, disconnects."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from tokenpipe.engines.fake import FakeEngine
from tokenpipe.errors import (
    BadRequest,
    ContextOverflow,
    EngineError,
    EngineUnavailable,
    Overloaded,
    ShuttingDown,
    TooManyStreams,
    Unauthorized,
    UnknownModel,
)
from tokenpipe.protocol.anthropic.errors import error_body, status_of
from tokenpipe.protocol.anthropic.events import MessageRender, usage_json
from tokenpipe.scheduler import Scheduler
from tokenpipe.server.anthropic.session_response import SessionResponse, error_response
from tokenpipe.server.doors import ANTHROPIC
from tokenpipe.session import Delta, Finished
from tokenpipe.types import (
    FinishReason,
    GenerationRequest,
    Message,
    SamplingParams,
    Timing,
    Usage,
)


@pytest.mark.parametrize(("exc", "status", "kind"), [
    (BadRequest("x"), 400, "invalid_request_error"),
    (ContextOverflow("x", param="max_tokens"), 400, "invalid_request_error"),
    (Unauthorized("x"), 401, "authentication_error"),
    (UnknownModel("x", param="model"), 404, "not_found_error"),
    (TooManyStreams("x"), 429, "rate_limit_error"),
    (Overloaded("x", retry_after_ms=1000), 529, "overloaded_error"),
    (EngineError("x"), 500, "api_error"),
    (EngineUnavailable("x"), 503, "api_error"),
    (ShuttingDown("x"), 503, "api_error"),
])
def test_every_error_maps_to_anthropics_status_and_type(exc: Any, status: int,
                                                         kind: str) -> None:
    assert status_of(exc) == status
    body = error_body(exc)
    assert body["type"] == "error" and body["error"]["type"] == kind
    assert set(body["error"]) == {"type", "message"}


def test_error_message_leads_with_the_field() -> None:
    body = error_body(ContextOverflow("prompt (9 tokens) plus max_tokens (9) exceeds the "
                                      "context", param="messages"))
    assert body["error"]["message"].startswith("messages: prompt (9 tokens)")
    body = error_body(ContextOverflow("max_tokens (9) exceeds", param="max_tokens"))
    assert body["error"]["message"] == "max_tokens (9) exceeds"  # said once, not twice


def test_full_queue_answers_529_with_retry_after() -> None:
    response = error_response(Overloaded("full", retry_after_ms=1500))
    assert response.status_code == 529
    assert response.headers["retry-after"] == "2"
    assert response.headers["retry-after-ms"] == "1500"


def test_paths_in_anthropics_shape() -> None:
    assert ANTHROPIC.owns("/v1/messages") and ANTHROPIC.owns("/v1/messages/count_tokens")
    assert not ANTHROPIC.owns("/v1/messagesX")
    assert not ANTHROPIC.owns("/v1/chat/completions")


def test_usage_follows_anthropics_meaning() -> None:
    assert usage_json(Usage(prompt_tokens=10, completion_tokens=3, cached_tokens=4)) == {
        "input_tokens": 6, "output_tokens": 3, "cache_read_input_tokens": 4,
        "cache_creation_input_tokens": 0}


def test_delta_event_is_valid_json_for_any_text() -> None:
    render = MessageRender("m")
    render.opening(Usage(1, 0), None)  # the text block at index 0
    for seq, text in enumerate(("plain", 'quote " and \\ back', "line\nbreak", "日本 🎉",
                                "\u2028")):
        raw = render.delta(Delta(seq, text)).decode()
        name, data = raw.split("\n", 1)
        assert name == "event: content_block_delta" and raw.endswith("\n\n")
        assert "\n" not in data.strip()
        assert json.loads(data.removeprefix("data: ")) == {
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}


END = Finished(FinishReason.TOOL_CALLS, Usage(5, 9), Timing(0.0, 1.0, 2.0, None))
ANSWER = [Delta(0, "plan", "reasoning"), Delta(1, " more", "reasoning"), Delta(2, "Let me."),
          Delta(3, "", "tool_call", 0, "call_ab12", "get_weather"),
          Delta(4, '{"city": "Pa', "tool_call", 0), Delta(5, 'ris"}', "tool_call", 0),
          Delta(6, '{"q"', "tool_call", 1, "call_cd34", "search"),
          Delta(7, ': "x"}', "tool_call", 1)]


def named(raw: bytes) -> list[tuple[str, Any]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = block.split("\n")
        if lines[0].startswith("event: "):
            out.append((lines[0][7:], json.loads(lines[1].removeprefix("data: "))))
    return out


def test_blocks_follow_the_channels_streamed_and_whole() -> None:
    render = MessageRender("m")
    raw = render.opening(Usage(5, 0), ANSWER[0]) + b"".join(
        render.delta(d) for d in ANSWER) + render.finish(END)
    got = named(raw)
    calls = MessageRender("m")  # an answer that opens with a call starts its block once
    opened = named(calls.opening(Usage(5, 0), ANSWER[3]) + calls.delta(ANSWER[3]))
    assert [n for n, _ in opened] == ["message_start", "content_block_start", "ping"]
    starts = [(d["index"], d["content_block"]) for n, d in got if n == "content_block_start"]
    assert starts == [
        (0, {"type": "thinking", "thinking": "", "signature": ""}),
        (1, {"type": "text", "text": ""}),
        (2, {"type": "tool_use", "id": "toolu_ab12", "name": "get_weather", "input": {}}),
        (3, {"type": "tool_use", "id": "toolu_cd34", "name": "search", "input": {}})]
    assert [d["index"] for n, d in got if n == "content_block_stop"] == [0, 1, 2, 3]
    deltas = [(d["index"], d["delta"]) for n, d in got if n == "content_block_delta"]
    assert deltas == [
        (0, {"type": "thinking_delta", "thinking": "plan"}),
        (0, {"type": "thinking_delta", "thinking": " more"}),
        (1, {"type": "text_delta", "text": "Let me."}),
        (2, {"type": "input_json_delta", "partial_json": '{"city": "Pa'}),
        (2, {"type": "input_json_delta", "partial_json": 'ris"}'}),
        (3, {"type": "input_json_delta", "partial_json": '{"q"'}),
        (3, {"type": "input_json_delta", "partial_json": ': "x"}'})]
    names = [n for n, _ in got]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert got[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    whole = MessageRender("m").whole(ANSWER, END)
    assert whole["content"] == [
        {"type": "thinking", "thinking": "plan more", "signature": ""},
        {"type": "text", "text": "Let me."},
        {"type": "tool_use", "id": "toolu_ab12", "name": "get_weather",
         "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_cd34", "name": "search", "input": {"q": "x"}}]
    assert whole["stop_reason"] == "tool_use"


def test_stop_sequence_and_a_cut_call_and_an_empty_answer() -> None:
    stopped = Finished(FinishReason.STOP, Usage(1, 2), END.timing, "STOP")
    whole = MessageRender("m").whole([Delta(0, "a")], stopped)
    assert whole["stop_reason"] == "stop_sequence" and whole["stop_sequence"] == "STOP"
    assert named(MessageRender("m").finish(stopped))[-2][1]["delta"] == {
        "stop_reason": "stop_sequence", "stop_sequence": "STOP"}
    cut = Finished(FinishReason.LENGTH, Usage(1, 2), END.timing)
    whole = MessageRender("m").whole(ANSWER[3:5], cut)  # max_tokens inside the arguments
    assert whole["content"] == [{"type": "tool_use", "id": "toolu_ab12", "name": "get_weather",
                                 "input": {}}]  # an unfinished string is not read
    whole = MessageRender("m").whole([*ANSWER[3:5], Delta(9, '", "n": 2', "tool_call", 0)], cut)
    assert whole["content"][0]["input"] == {"city": "Pa", "n": 2}  # read as far as it goes
    assert whole["stop_reason"] == "max_tokens"
    empty = MessageRender("m")
    assert MessageRender("m").whole([], cut)["content"] == [{"type": "text", "text": ""}]
    got = named(empty.opening(Usage(1, 0), None) + empty.finish(cut))
    assert [n for n, _ in got] == ["message_start", "content_block_start", "ping",
                                   "content_block_stop", "message_delta", "message_stop"]


# ---- SessionResponse through raw ASGI messages -------------------------------------------


class Asgi:
    """receive/send of one HTTP request: the test injects http.disconnect when it likes."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[tuple[float, dict[str, Any]]] = []
        self.on_send: Any = None

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send(self, message: Any) -> None:
        self.sent.append((time.monotonic(), message))
        if self.on_send is not None:
            self.on_send(message)

    def disconnect(self) -> None:
        self.inbox.put_nowait({"type": "http.disconnect"})

    @property
    def start(self) -> dict[str, Any]:
        return self.sent[0][1]

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for _, m in self.sent[1:])

    def events(self) -> list[tuple[str, Any]]:
        """(event name, data) of every named event, in order."""
        out = []
        for block in self.body.decode().split("\n\n"):
            lines = block.split("\n")
            if lines[0].startswith("event: "):
                out.append((lines[0][7:], json.loads(lines[1].removeprefix("data: "))))
        return out


async def serve(scheduler: Scheduler, text: str, *, stream: bool = True,
                max_tokens: int = 64, ping_s: float = 15.0, asgi: Asgi | None = None,
                session: Any = None) -> tuple[Asgi, Any]:
    session = session or scheduler.submit(GenerationRequest(
        messages=(Message("user", text),), params=SamplingParams(max_tokens=max_tokens)))
    asgi = asgi or Asgi()
    response = SessionResponse(session, stream=stream, ping_s=ping_s)
    await asyncio.wait_for(response({"type": "http"}, asgi.receive, asgi.send), 30)
    return asgi, session


@pytest.fixture
def scheduler() -> Scheduler:
    return Scheduler(FakeEngine())


def text_of(events: list[tuple[str, Any]]) -> str:
    return "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")


async def test_stream_events_in_anthropics_order(scheduler: Scheduler) -> None:
    asgi, session = await serve(scheduler, "[[echo]] héllo wörld")
    assert asgi.start["status"] == 200
    assert dict(asgi.start["headers"])[b"content-type"].startswith(b"text/event-stream")
    events = asgi.events()
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    message = events[0][1]["message"]
    assert message["content"] == [] and message["stop_reason"] is None
    assert message["id"].startswith("msg_") and message["model"] == "fake"
    assert message["usage"]["input_tokens"] == session.prepared.prompt_tokens
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    assert text_of(events) == "héllo wörld"
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == session.completion_tokens
    assert asgi.sent[-1][1]["more_body"] is False


async def test_max_tokens_is_stop_reason_max_tokens(scheduler: Scheduler) -> None:
    whole, _ = await serve(scheduler, "[[tokens=100]]", max_tokens=5, stream=False)
    answer = json.loads(whole.body)
    assert answer["stop_reason"] == "max_tokens" and answer["usage"]["output_tokens"] == 5
    streamed, _ = await serve(scheduler, "[[tokens=100]]", max_tokens=5)
    assert streamed.events()[-2][1]["delta"]["stop_reason"] == "max_tokens"


async def test_whole_answer_matches_stream(scheduler: Scheduler) -> None:
    whole, _ = await serve(scheduler, "[[tokens=40]]", stream=False)
    streamed, _ = await serve(scheduler, "[[tokens=40]]")
    answer = json.loads(whole.body)
    assert set(answer) == {"id", "type", "role", "model", "content", "stop_reason",
                           "stop_sequence", "usage"}
    assert answer["type"] == "message" and answer["role"] == "assistant"
    events = streamed.events()
    assert answer["content"] == [{"type": "text", "text": text_of(events)}]
    assert answer["usage"] == events[-2][1]["usage"]
    assert answer["stop_reason"] == events[-2][1]["delta"]["stop_reason"]


async def test_failure_before_first_token_is_an_http_status(scheduler: Scheduler) -> None:
    for stream in (True, False):
        asgi, _ = await serve(scheduler, "[[fail_after=0]]", stream=stream)
        assert asgi.start["status"] == 500
        assert json.loads(asgi.body) == {"type": "error", "error": {
            "type": "api_error", "message": "fake engine fault after 0 tokens"}}


async def test_failure_after_first_token_is_an_error_event(scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[fail_after=3]][[pace_ms=5]]")
    events = asgi.events()
    assert asgi.start["status"] == 200
    assert events[0][0] == "message_start"
    assert events[-1] == ("error", {"type": "error", "error": {
        "type": "api_error", "message": "fake engine fault after 3 tokens"}})
    assert "message_stop" not in [n for n, _ in events]
    assert asgi.sent[-1][1]["more_body"] is False


async def test_idle_stream_gets_ping_events(scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[pace_ms=150]][[tokens=2]]", ping_s=0.02)
    assert asgi.start["status"] == 200  # a due ping commits the headers before any token
    assert asgi.sent[1][1]["body"] == b'event: ping\ndata: {"type":"ping"}\n\n'
    names = [n for n, _ in asgi.events()]
    first_delta = names.index("content_block_delta")
    assert "ping" in names[first_delta:]  # between tokens too
    assert names[-1] == "message_stop"


async def test_queued_request_hears_its_position() -> None:
    small = Scheduler(FakeEngine(max_batch=1))
    first = small.submit(GenerationRequest(prompt="[[pace_ms=20]][[tokens=5]]"))
    asgi, _ = await serve(small, "[[echo]] later")
    assert first.final is not None
    assert asgi.sent[1][1]["body"] == b": queued position=1\n\n"
    assert text_of(asgi.events()) == "later"


async def test_disconnect_cancels_within_one_step(scheduler: Scheduler) -> None:
    session = scheduler.submit(GenerationRequest(
        prompt="[[pace_ms=10]][[tokens=100000]]", params=SamplingParams(max_tokens=5000)))
    asgi = Asgi()
    seen: list[int] = []

    def on_send(message: dict[str, Any]) -> None:
        if b"text_delta" in message.get("body", b"") and not seen:
            seen.append(session.completion_tokens)
            asgi.disconnect()  # the client leaves right after its first text

    asgi.on_send = on_send
    await serve(scheduler, "", asgi=asgi, session=session)
    await asyncio.wait_for(session.done.wait(), 5)
    assert isinstance(session.final, Finished)
    assert session.final.reason is FinishReason.CANCELLED
    assert session.completion_tokens <= seen[0] + 1  # at most the step already under way
    assert scheduler.running == 0
    assert asgi.sent[-1][1].get("more_body") is True  # no message_stop: nobody listens


async def test_disconnect_cancels_a_whole_answer_too(scheduler: Scheduler) -> None:
    asgi = Asgi()
    session = scheduler.submit(GenerationRequest(
        prompt="[[pace_ms=10]][[tokens=100000]]", params=SamplingParams(max_tokens=5000)))
    task = asyncio.create_task(SessionResponse(session, stream=False)(
        {"type": "http"}, asgi.receive, asgi.send))
    while session.completion_tokens < 3:  # noqa: ASYNC110 - the session has no such event
        await asyncio.sleep(0.005)
    asgi.disconnect()
    await asyncio.wait_for(task, 5)
    assert isinstance(session.final, Finished)
    assert session.final.reason is FinishReason.CANCELLED
    assert asgi.sent == []
    assert scheduler.running == 0


async def test_count_tokens_equals_what_the_start_counts() -> None:
    scheduler = Scheduler(FakeEngine(context_tokens=32768))
    for text in ("hi", "x" * 20000):  # the long one is counted in a worker thread
        request = GenerationRequest(messages=(Message("system", "s"), Message("user", text)),
                                    params=SamplingParams(max_tokens=4))
        counted = await scheduler.count_tokens(request)
        session = await scheduler.start(request)
        assert counted == session.prepared.prompt_tokens > 0
        await session.done.wait()
