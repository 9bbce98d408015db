"""The OpenAI wire models, their errors, SSE encoding, and SessionResponse driven through raw
ASGI receive/send (STYLE.md item 11): headers, pings, failures and disconnects, in-process."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from pydantic import ValidationError

from tokenpipe.engines.fake import FakeEngine
from tokenpipe.errors import ContextOverflow, Overloaded
from tokenpipe.protocol.openai.completions import CompletionRequest
from tokenpipe.protocol.openai.errors import error_body, param_name, validation_error
from tokenpipe.protocol.openai.render import ChatRender, CompletionRender
from tokenpipe.protocol.openai.requests import ChatCompletionRequest
from tokenpipe.protocol.openai.responses import ChatCompletionChunk, ChunkChoice, ChunkDelta
from tokenpipe.protocol.sse import comment as sse_comment
from tokenpipe.protocol.sse import data as sse_data
from tokenpipe.scheduler import Scheduler
from tokenpipe.server.openai.session_response import SessionResponse
from tokenpipe.session import Finished
from tokenpipe.types import FinishReason, GenerationRequest, Message, SamplingParams

USER = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": USER, **fields})


def refusal(model: type[Any], body: dict[str, Any]) -> tuple[str | None, str | None, str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    err = validation_error(info.value.errors())
    assert err.status == 400 and error_body(err)["error"]["type"] == "invalid_request_error"
    return err.param, err.openai_code, err.message


# ---- requests -------------------------------------------------------------------------


def test_chat_request_maps_every_parameter() -> None:
    req = chat(temperature=0.5, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1,
               presence_penalty=0.5, frequency_penalty=-0.5, seed=7, stop="END",
               max_completion_tokens=12, model="m", n=1)
    assert req.to_request() == GenerationRequest(
        messages=(Message("user", "hi"),), model="m",
        params=SamplingParams(max_tokens=12, temperature=0.5, top_p=0.9, top_k=40, min_p=0.05,
                              repetition_penalty=1.1, presence_penalty=0.5,
                              frequency_penalty=-0.5, seed=7, stop=("END",)),
        split_reasoning=True)  # a chat answer's thinking section goes to reasoning_content
    assert req.max_tokens_param == "max_completion_tokens"
    for effort, asked in (("low", True), ("xhigh", True), ("none", False), (None, False)):
        assert chat(reasoning_effort=effort).to_request().think is asked  # level unapplied


def test_defaults_are_openais() -> None:
    params = chat().to_request().params
    assert params.temperature == 1.0 and params.max_tokens is None and params.stop == ()
    assert CompletionRequest.model_validate({"prompt": "x"}).to_request().params.max_tokens == 16
    assert chat(top_k=-1).to_request().params.top_k == 0  # vLLM's "off"


def test_messages_developer_role_and_text_parts() -> None:
    req = ChatCompletionRequest.model_validate({"messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
         "name": "ann"}]})
    assert req.to_request().messages == (Message("system", "be brief"), Message("user", "a\nb"))


def test_vllms_continue_flags_pass_where_they_say_what_tokenpipe_does() -> None:
    begun = [*USER, {"role": "assistant", "content": "Hel"}]
    req = ChatCompletionRequest.model_validate({
        "messages": begun, "continue_final_message": True, "add_generation_prompt": False})
    assert req.to_request().messages[-1] == Message("assistant", "Hel")
    chat(continue_final_message=False, add_generation_prompt=True)


def test_neutral_values_and_harmless_fields_pass() -> None:
    req = chat(tools=[], tool_choice="none", logprobs=False, top_logprobs=0, n=1,
               response_format={"type": "text"}, modalities=["text"], logit_bias={},
               user="u", metadata={"k": "v"}, store=False, service_tier="auto",
               parallel_tool_calls=True, prompt_cache_key="c", safety_identifier="s",
               stream=True, stream_options={"include_usage": True, "include_obfuscation": False})
    assert req.include_usage
    CompletionRequest.model_validate({"prompt": ["one"], "echo": False, "best_of": 1,
                                      "suffix": None})


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"messages": USER, "temperature": 2.5}, "temperature", "decimal_above_max_value"),
    ({"messages": USER, "temperature": "hot"}, "temperature", "invalid_type"),
    ({"messages": USER, "top_p": -0.1}, "top_p", "decimal_below_min_value"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ({"messages": USER, "max_tokens": 1.5}, "max_tokens", "invalid_type"),
    ({"messages": USER, "max_tokens": True}, "max_tokens", "invalid_type"),
    ({"messages": USER, "presence_penalty": 3}, "presence_penalty", "decimal_above_max_value"),
    ({"messages": USER, "seed": "1"}, "seed", "invalid_type"),
    ({"messages": USER, "stop": 3}, "stop", "invalid_type"),
    ({"messages": USER, "stop": [""]}, "stop[0]", "invalid_value"),
    ({"messages": USER, "stop": ["x"] * 17}, "stop", "invalid_value"),
    ({"messages": USER, "n": 0}, "n", "integer_below_min_value"),
    ({"messages": USER, "tools": [{"type": "function"}]}, "tools[0].function",
     "missing_required_parameter"),
    ({"messages": USER, "tool_choice": "required"}, "tool_choice", "invalid_value"),
    ({"messages": USER, "functions": [{"name": "f"}]}, "functions", "unsupported_parameter"),
    ({"messages": USER, "top_logprobs": 3}, "top_logprobs", "invalid_value"),
    ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs",
     "integer_above_max_value"),
    ({"messages": USER, "logprobs": 1}, "logprobs", "invalid_type"),
    ({"messages": USER, "logit_bias": {"1": 5}}, "logit_bias", "unsupported_parameter"),
    ({"messages": USER, "response_format": {"type": "yaml"}}, "response_format.type",
     "invalid_value"),
    ({"messages": USER, "response_format": {"type": "json_object", "json_schema": {
        "name": "x"}}}, "response_format.json_schema", "invalid_value"),
    ({"messages": USER, "audio": {"voice": "x"}}, "audio", "unsupported_parameter"),
    ({"messages": USER, "modalities": ["text", "audio"]}, "modalities", "unsupported_value"),
    ({"messages": USER, "reasoning_effort": "lots"}, "reasoning_effort", "invalid_value"),
    ({"messages": USER, "frobnicate": 1}, "frobnicate", "unknown_parameter"),
    ({"messages": USER, "min_tokens": 3}, "min_tokens", "unknown_parameter"),
    ({"messages": USER, "stream_options": {"include_usage": True}}, "stream_options",
     "invalid_value"),
    ({"messages": USER, "stream": True, "stream_options": {"bogus": 1}},
     "stream_options.bogus", "unknown_parameter"),
    ({"messages": USER, "max_tokens": 5, "max_completion_tokens": 6},
     "max_completion_tokens", "invalid_value"),
    ({"messages": USER, "continue_final_message": True}, "continue_final_message",
     "unsupported_value"),
    ({"messages": USER, "add_generation_prompt": False}, "add_generation_prompt",
     "unsupported_value"),
    ({"messages": [*USER, {"role": "assistant", "content": "Hel"}],
      "continue_final_message": False}, "continue_final_message", "unsupported_value"),
    ({"messages": [*USER, {"role": "assistant", "content": "Hel"}],
      "add_generation_prompt": True}, "add_generation_prompt", "unsupported_value"),
    ({}, "messages", "missing_required_parameter"),
    ({"messages": []}, "messages", "invalid_value"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id",
     "invalid_value"),
    ({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]},
     "messages[0].tool_call_id", "invalid_value"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content", "unsupported_value"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}]},
     "messages[0].tool_calls[0].type", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [{
        "id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]},
     "messages[0].tool_calls", "invalid_value"),
])
def test_chat_refusals_name_the_param(body: dict[str, Any], param: str, code: str) -> None:
    assert refusal(ChatCompletionRequest, body)[:2] == (param, code)


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"prompt": ["a", "b"]}, "prompt", "unsupported_value"),
    ({"prompt": [1, -2, 3]}, "prompt", "unsupported_value"),
    ({"prompt": [[1, 2], [3]]}, "prompt", "unsupported_value"),
    ({"prompt": "x", "echo": True}, "echo", "unsupported_parameter"),
    ({"prompt": "x", "suffix": "tail"}, "suffix", "unsupported_parameter"),
    ({"prompt": "x", "best_of": 3}, "best_of", "unsupported_parameter"),
    ({"prompt": "x", "logprobs": 21}, "logprobs", "integer_above_max_value"),
    ({"prompt": "x", "logprobs": True}, "logprobs", "invalid_type"),
    ({"prompt": "x", "messages": USER}, "messages", "unknown_parameter"),
    ({}, "prompt", "missing_required_parameter"),
])
def test_completion_refusals_name_the_param(body: dict[str, Any], param: str, code: str) -> None:
    assert refusal(CompletionRequest, body)[:2] == (param, code)


def test_error_messages_read_like_openais() -> None:
    assert refusal(ChatCompletionRequest, {"messages": USER, "x": 1})[2] == (
        "Unrecognized request argument supplied: x")
    assert refusal(ChatCompletionRequest, {})[2] == "Missing required parameter: 'messages'."
    assert "temperature" in refusal(ChatCompletionRequest, {"messages": USER,
                                                            "temperature": 9})[2]


def test_param_names_follow_openai() -> None:
    assert param_name(("messages", 0, "content")) == "messages[0].content"
    assert param_name(()) is None


def test_error_body_maps_codes_and_keeps_messages() -> None:
    exc = ContextOverflow("prompt (9 tokens) plus max_tokens (9000) exceeds", param="max_tokens")
    assert error_body(exc) == {"error": {
        "message": "prompt (9 tokens) plus max_tokens (9000) exceeds",
        "type": "invalid_request_error", "param": "max_tokens",
        "code": "context_length_exceeded"}}
    assert error_body(Overloaded("busy"))["error"]["type"] == "rate_limit_error"


# ---- SSE encoding -----------------------------------------------------------------------


def test_sse_events_are_one_line_each() -> None:
    event = sse_data({"text": "a\nb\r\n\u2028ü"})
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert event.count(b"\n") == 2
    assert json.loads(event[6:]) == {"text": "a\nb\r\n\u2028ü"}
    assert sse_comment("queued\nposition=1") == b": queued position=1\n\n"


def test_chunk_delta_sends_only_what_changed() -> None:
    def choice(delta: ChunkDelta, reason: Any = None) -> dict[str, Any]:
        chunk = ChatCompletionChunk(id="c", created=1, model="m",
                                    choices=[ChunkChoice(delta=delta, finish_reason=reason)])
        result: dict[str, Any] = json.loads(sse_data(chunk)[6:])["choices"][0]
        return result

    assert choice(ChunkDelta(role="assistant", content=""))["delta"] == {
        "role": "assistant", "content": ""}
    assert choice(ChunkDelta(content="x"))["delta"] == {"content": "x"}
    last = choice(ChunkDelta(), "stop")
    assert last == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}


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

    def data(self) -> list[Any]:
        lines = [ln[6:] for ln in self.body.decode().split("\n") if ln.startswith("data: ")]
        return [ln if ln == "[DONE]" else json.loads(ln) for ln in lines]


async def serve(scheduler: Scheduler, text: str, *, stream: bool = True,
                max_tokens: int | None = None, ping_s: float = 15.0,
                include_usage: bool = False, asgi: Asgi | None = None,
                chat_api: bool = True, session: Any = None) -> tuple[Asgi, Any]:
    """Submits `text` (unless a session is given) and runs its response to the end."""
    session = session or scheduler.submit(GenerationRequest(
        messages=(Message("user", text),), params=SamplingParams(max_tokens=max_tokens)))
    asgi = asgi or Asgi()
    render = ChatRender("fake") if chat_api else CompletionRender("fake")
    response = SessionResponse(session, render, stream=stream, include_usage=include_usage,
                               ping_s=ping_s)
    await asyncio.wait_for(response({"type": "http"}, asgi.receive, asgi.send), 30)
    return asgi, session


@pytest.fixture
def scheduler() -> Scheduler:
    return Scheduler(FakeEngine())


async def test_stream_role_first_then_text_then_finish_usage_done(scheduler: Scheduler) -> None:
    asgi, session = await serve(scheduler, "[[echo]] héllo wörld", include_usage=True)
    assert asgi.start["status"] == 200
    assert dict(asgi.start["headers"])[b"content-type"] == b"text/event-stream; charset=utf-8"
    events = asgi.data()
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == (
        "héllo wörld")
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == (
        session.completion_tokens)
    assert len({c["id"] for c in chunks}) == 1
    assert asgi.sent[-1][1]["more_body"] is False


async def test_completion_stream_has_text_chunks(scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[echo]] abc", chat_api=False)
    chunks = asgi.data()[:-1]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == "abc"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_failure_before_first_token_is_an_http_status(scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[fail_after=0]]")
    assert asgi.start["status"] == 500
    assert json.loads(asgi.body)["error"]["code"] == "engine_error"


async def test_failure_after_first_token_is_an_error_event_then_done(
        scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[fail_after=3]][[pace_ms=5]]")
    events = asgi.data()
    assert asgi.start["status"] == 200
    assert events[-2]["error"]["code"] == "engine_error" and events[-1] == "[DONE]"
    assert all("error" not in e for e in events[:-2])


async def test_whole_answer_matches_stream(scheduler: Scheduler) -> None:
    whole, _ = await serve(scheduler, "[[tokens=40]]", stream=False)
    streamed, _ = await serve(scheduler, "[[tokens=40]]", include_usage=True)
    answer = json.loads(whole.body)
    chunks = streamed.data()[:-1]
    assert answer["choices"][0]["message"]["content"] == "".join(
        c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert answer["usage"] == chunks[-1]["usage"]
    assert answer["choices"][0]["finish_reason"] == chunks[-2]["choices"][0]["finish_reason"]


async def test_idle_stream_gets_comment_pings(scheduler: Scheduler) -> None:
    asgi, _ = await serve(scheduler, "[[pace_ms=150]][[tokens=2]]", ping_s=0.02)
    assert asgi.start["status"] == 200  # a due ping commits the headers before any token
    first_body = asgi.sent[1][1]["body"]
    assert first_body == b": ping\n\n"
    assert asgi.body.count(b": ping\n\n") >= 2
    assert asgi.data()[-1] == "[DONE]"


async def test_queued_request_hears_its_position(scheduler: Scheduler) -> None:
    small = Scheduler(FakeEngine(max_batch=1))
    first = small.submit(GenerationRequest(prompt="[[pace_ms=20]][[tokens=5]]"))
    asgi, _ = await serve(small, "[[echo]] later")
    assert first.final is not None
    assert asgi.sent[1][1]["body"] == b": queued position=1\n\n"
    assert asgi.data()[-1] == "[DONE]"


async def test_disconnect_cancels_within_one_step(scheduler: Scheduler) -> None:
    session = scheduler.submit(GenerationRequest(
        prompt="[[pace_ms=10]][[tokens=100000]]", params=SamplingParams(max_tokens=5000)))
    asgi = Asgi()
    seen: list[int] = []

    def on_send(message: dict[str, Any]) -> None:
        if b'"content":"' in message.get("body", b"") and not seen:
            seen.append(session.completion_tokens)
            asgi.disconnect()  # the client leaves right after its first text

    asgi.on_send = on_send
    await serve(scheduler, "", asgi=asgi, session=session)
    await asyncio.wait_for(session.done.wait(), 5)
    assert isinstance(session.final, Finished)
    assert session.final.reason is FinishReason.CANCELLED
    assert session.completion_tokens <= seen[0] + 1  # at most the step already under way
    assert scheduler.running == 0
    assert asgi.sent[-1][1].get("more_body") is True  # no [DONE]: nobody listens


async def test_disconnect_cancels_a_whole_answer_too(scheduler: Scheduler) -> None:
    asgi = Asgi()
    session = scheduler.submit(GenerationRequest(
        prompt="[[pace_ms=10]][[tokens=100000]]", params=SamplingParams(max_tokens=5000)))
    response = SessionResponse(session, ChatRender("fake"), stream=False)
    task = asyncio.create_task(response({"type": "http"}, asgi.receive, asgi.send))
    while session.completion_tokens < 3:  # noqa: ASYNC110 - the session has no such event
        await asyncio.sleep(0.005)
    asgi.disconnect()
    await asyncio.wait_for(task, 5)
    assert isinstance(session.final, Finished)
    assert session.final.reason is FinishReason.CANCELLED
    assert asgi.sent == []
    assert scheduler.running == 0


# ---- Generation: the route's lean handler reads the body once and words every refusal ------


async def lean(scheduler: Scheduler, body: bytes | list[bytes], *,
               headers: list[tuple[bytes, bytes]] | None = None,
               path: str = "/v1/chat/completions") -> Asgi:
    from types import SimpleNamespace

    from tokenpipe.config import Settings
    from tokenpipe.server.openai.lean import _SERVED, Generation
    from tokenpipe.server.runtime import Runtime

    runtime = Runtime(Settings())
    runtime.models.add_loaded("fake", scheduler)
    asgi = Asgi()
    parts = [body] if isinstance(body, bytes) else body
    for i, part in enumerate(parts):
        asgi.inbox.put_nowait({"type": "http.request", "body": part,
                               "more_body": i < len(parts) - 1})
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"",
             "headers": [(b"content-type", b"application/json")] if headers is None
             else headers, "app": SimpleNamespace(state=SimpleNamespace(runtime=runtime))}
    await asyncio.wait_for(Generation(*_SERVED[path])(scope, asgi.receive, asgi.send), 30)
    return asgi


async def test_lean_handler_streams_a_request_read_in_parts(scheduler: Scheduler) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "[[echo]] héllo"}],
                       "stream": True}).encode()
    asgi = await lean(scheduler, [body[:10], body[10:]])  # the body in two messages
    assert asgi.start["status"] == 200
    events = asgi.data()
    assert events[-1] == "[DONE]"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in events[:-1]) == "héllo"
    asgi = await lean(scheduler, json.dumps({"prompt": "[[echo]] abc"}).encode(),
                      path="/v1/completions")
    assert json.loads(asgi.body)["choices"][0]["text"] == "abc"


@pytest.mark.parametrize(("body", "headers", "param", "message"), [
    (b'{"messages": [', None, None, "We could not parse the JSON body"),
    (b'{"messages": []}', None, "messages", "messages"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "bogus": 1}', None, "bogus",
     "Unrecognized request argument supplied: bogus"),
    (b'{"messages": [{"role": "user", "content": "hi"}]}', [], None, "must be a JSON object"),
    (b'{"messages": [{"role": "user", "content": "hi"}]}', [(b"content-type", b"text/plain")],
     None, "must be a JSON object"),
    (b"", None, None, "must be a JSON object"),
    (b"[" * 100000 + b"]" * 100000, None, None, "nested too deeply"),
])
async def test_lean_handler_words_each_refusal_in_openais_shape(
        scheduler: Scheduler, body: bytes, headers: Any, param: str | None,
        message: str) -> None:
    asgi = await lean(scheduler, body, headers=headers)
    assert asgi.start["status"] == 400
    error = json.loads(asgi.body)["error"]
    assert error["param"] == param and message in error["message"]
    assert error["type"] == "invalid_request_error"
    assert scheduler.running == 0


async def test_lean_handler_answers_tokenpipe_errors_itself(scheduler: Scheduler) -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}], "model": "nope"}'
    asgi = await lean(scheduler, body)
    assert asgi.start["status"] == 404
    assert json.loads(asgi.body)["error"]["code"] == "model_not_found"
    body = b'{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 99999}'
    error = json.loads((await lean(scheduler, body)).body)["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "max_completion_tokens"  # the name this client sent


def test_logprobs_map_to_the_number_of_alternatives() -> None:
    assert chat(logprobs=True, top_logprobs=3).to_request().params.logprobs == 3
    assert chat(logprobs=True).to_request().params.logprobs == 0
    assert chat(logprobs=False, top_logprobs=0).to_request().params.logprobs is None
    assert chat().to_request().params.logprobs is None
    done = CompletionRequest.model_validate({"prompt": "x", "logprobs": 20})
    assert done.to_request().params.logprobs == 20 and done.wants_logprobs
    assert CompletionRequest.model_validate({"prompt": "x"}).to_request().params.logprobs is None


def test_a_prompt_of_token_ids_and_return_token_ids() -> None:
    """vLLM's shapes: a prompt of token ids (alone or as the one prompt of a list) is read
    as it is; return_token_ids asks for the answer's ids on every door's request."""
    for prompt in ([5, 6, 7], [[5, 6, 7]]):
        request = CompletionRequest.model_validate(
            {"prompt": prompt, "return_token_ids": True}).to_request()
        assert request.prompt == "" and request.prompt_ids == (5, 6, 7)
        assert request.token_ids
    chat = ChatCompletionRequest.model_validate({"messages": USER}).to_request()
    assert not chat.token_ids and chat.prompt_ids is None
