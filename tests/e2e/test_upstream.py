"""The openai engine against real upstream servers on free ports.

Two kinds of upstream: a small OpenAI-compatible server written here that misbehaves on
request (dies mid-stream, answers 500 or 429, stalls; the faults a real vLLM shows under
trouble, made reproducible), and a real `tokenpipe serve` on the fake engine. Timeouts are
set short so that faults show quickly; nothing asserts on how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.conftest import ServerProcess, drop_and_resume, free_port, running
from tokenpipe.client import Client, ServerError
from tokenpipe.engines.base import PreparedRequest
from tokenpipe.engines.fake import SCRIPT
from tokenpipe.engines.openai import OpenAIEngine
from tokenpipe.errors import (
    BadRequest,
    ContextOverflow,
    EngineError,
    EngineUnavailable,
    Overloaded,
    UnknownModel,
)
from tokenpipe.types import (
    EngineEvent,
    EngineFinish,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    Message,
    OutputFormat,
    SamplingParams,
    Tool,
)

pytestmark = pytest.mark.e2e

PIECES = ["Hello", ",", " wörld", " 日本", "🎉", " and", " more", "."]
PROMPT_TOKENS = 17
_DIRECTIVE = re.compile(r"\[\[(\w+)(?:=(\d+))?\]\]")


class FaultUpstream:
    """An OpenAI-compatible streaming server that misbehaves when asked to. Directives in
    the last message (or the prompt), or in `defaults` for every request:

        status=N        answer N before streaming (400 context / other, 404, 429, 5xx)
        context         with status=400: a vLLM-style context-length refusal
        retry_after=S   with status=429: the Retry-After header
        tokens=N        N text chunks (default 8)     per_chunk=K  K pieces per chunk
        first_ms=N      wait N ms before the first text chunk
        die_after=N     drop the connection after N chunks
        stall_after=N   stop sending after N chunks (the connection stays open)
        error_after=N   an in-band error event after N chunks
        reasoning=N     N chunks of `reasoning_content` (vLLM's) before the text
        think           a first text chunk "<think>" (a thinking section in the content)

    An answer begun as its own (a chat's last assistant message, or a prompt that ends with
    the first pieces) goes on from there, as a model would: chunks, faults and usage count
    from there, the text begun counted in the prompt. With tls=(certfile, keyfile) it
    speaks HTTPS.
    """

    def __init__(self, model: str = "fault-model", *, extra_models: tuple[str, ...] = (),
                 key: str | None = None, tls: tuple[str, str] | None = None) -> None:
        self.model = model
        self.extra_models = extra_models
        self.key = key  # like vllm serve --api-key: /v1 needs it, /health does not
        self.defaults: dict[str, int] = {}
        self.health_status = 200
        self.refuses_token_ids = False  # as OpenAI's API: a 400 for a field it does not know
        self.bodies: list[dict[str, Any]] = []
        self.open_streams = 0
        self.disconnects = 0
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        cert, key_file = tls or (None, None)  # HTTPS with this certificate and key
        self.server = uvicorn.Server(uvicorn.Config(
            self._app(), host="127.0.0.1", port=self.port, log_level="critical",
            ssl_certfile=cert, ssl_keyfile=key_file,
            lifespan="off", timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def reset(self) -> None:
        self.defaults = {}
        self.health_status = 200
        self.refuses_token_ids = False
        self.bodies.clear()

    def start(self) -> FaultUpstream:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the fault upstream did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def _app(self) -> FastAPI:
        app = FastAPI()

        def check_key(request: Request) -> None:
            if self.key and request.headers.get("authorization") != f"Bearer {self.key}":
                raise HTTPException(401, "Unauthorized")

        @app.get("/health")
        async def health() -> Response:
            return Response(status_code=self.health_status)

        @app.get("/v1/models", dependencies=[Depends(check_key)])
        async def models() -> dict[str, Any]:
            cards = [{"id": m, "object": "model", "max_model_len": 4096}
                     for m in (self.model, *self.extra_models)]
            return {"object": "list", "data": cards}

        @app.post("/v1/chat/completions", dependencies=[Depends(check_key)])
        async def chat(request: Request) -> Response:
            body = await request.json()
            turns = body["messages"]
            done = begun_pieces(turns[-1]["content"] or "", whole=True) if (
                turns[-1]["role"] == "assistant" and len(turns) > 1) else 0
            return self._answer(body, turns[-2 if done else -1]["content"], done, chat=True)

        @app.post("/v1/completions", dependencies=[Depends(check_key)])
        async def completions(request: Request) -> Response:
            body = await request.json()
            prompt = body["prompt"]
            return self._answer(body, prompt, begun_pieces(prompt, whole=False), chat=False)

        return app

    def _answer(self, body: dict[str, Any], last: str, done: int, *, chat: bool
                ) -> Response:
        self.bodies.append(body)
        if self.refuses_token_ids and "return_token_ids" in body:
            return JSONResponse({"error": {
                "message": "Unrecognized request argument supplied: return_token_ids",
                "type": "invalid_request_error", "param": None, "code": None}}, 400)
        d = {**self.defaults, **{m[1]: int(m[2] or 0) for m in _DIRECTIVE.finditer(last)}}
        d["done"] = done
        status = d.get("status", 200)
        if status == 400 and "context" in d:
            return JSONResponse({"object": "error", "type": "BadRequestError", "code": 400,
                                 "message": "This model's maximum context length is 4096 "
                                            "tokens. However, you requested 9000 tokens."},
                                status_code=400)
        if status == 404:
            return JSONResponse({"error": {"message": f"The model `{body['model']}` does not "
                                           "exist.", "type": "NotFoundError", "code": 404}},
                                status_code=404)
        if status != 200:
            headers = {"retry-after": str(d["retry_after"])} if "retry_after" in d else None
            param = "temperature" if status == 400 else None
            return JSONResponse({"error": {"message": f"injected {status}", "param": param,
                                           "type": "invalid_request_error", "code": None}},
                                status_code=status, headers=headers)
        return StreamingResponse(self._events(body, d, chat), media_type="text/event-stream")

    async def _events(self, body: dict[str, Any], d: dict[str, int], chat: bool
                      ) -> AsyncIterator[bytes]:
        def chunk(text: str | None, finish: str | None = None,
                  usage: dict[str, int] | None = None) -> bytes:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {} if text is None else {"content": text}
            else:
                choice["text"] = text or ""
            obj = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion",
                   "model": self.model, "choices": [] if usage else [choice], "usage": usage}
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        self.open_streams += 1
        done = False
        try:
            if chat:
                yield chunk("")  # the role chunk carries no text
            begun = d["done"]  # pieces of the answer the request began with
            n = min(d.get("tokens", len(PIECES)), begun + body["max_tokens"])
            per = d.get("per_chunk", 1)
            if "first_ms" in d:
                await asyncio.sleep(d["first_ms"] / 1000)
            for _ in range(d.get("reasoning", 0)):
                yield b'data: {"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]}\n\n'
            if "think" in d:
                yield chunk("<think>")
            for i in range(begun, n, per):
                if d.get("die_after") == i - begun:
                    raise ConnectionAbortedError("the fault upstream dies mid-stream")
                if d.get("stall_after") == i - begun:
                    await asyncio.sleep(3600)
                if d.get("error_after") == i - begun:
                    yield b'data: {"error": {"message": "injected in-band", "code": 500}}\n\n'
                    yield b"data: [DONE]\n\n"
                    done = True
                    return
                yield chunk("".join(PIECES[j % len(PIECES)] for j in range(i, min(i + per, n))))
                await asyncio.sleep(0)
            made, prompt = n - begun, PROMPT_TOKENS + begun
            yield chunk(None, "length" if made == body["max_tokens"] else "stop")
            yield chunk(None, usage={"prompt_tokens": prompt, "completion_tokens": made,
                                     "total_tokens": prompt + made})
            yield b"data: [DONE]\n\n"
            done = True
        finally:
            self.open_streams -= 1
            if not done:
                self.disconnects += 1


def expected_text(n: int = len(PIECES)) -> str:
    return "".join(PIECES[j % len(PIECES)] for j in range(n))


def begun_pieces(text: str, *, whole: bool) -> int:
    """How many of the answer's pieces `text` is (`whole`), or ends with: 0 for none."""
    for k in range(len(PIECES), 0, -1):
        if text == expected_text(k) or (not whole and text.endswith(expected_text(k))):
            return k
    return 0


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultUpstream]:
    server = FaultUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def upstream_b() -> Iterator[FaultUpstream]:
    server = FaultUpstream().start()
    yield server
    server.stop()


@pytest.fixture
def fresh(upstream: FaultUpstream, upstream_b: FaultUpstream) -> Iterator[None]:
    upstream.reset()
    upstream_b.reset()
    yield
    upstream.reset()
    upstream_b.reset()


EngineFactory = Callable[..., Any]


@pytest.fixture
async def engine(fresh: None) -> AsyncIterator[EngineFactory]:
    """engine(*urls, **options) -> a loaded OpenAIEngine, closed after the test."""
    made: list[OpenAIEngine] = []

    async def make(*urls: str, **options: Any) -> OpenAIEngine:
        options.setdefault("first_token_timeout_s", 10.0)
        options.setdefault("idle_timeout_s", 10.0)
        eng = OpenAIEngine(list(urls), **options)
        eng.health_interval_s = 0.05
        made.append(eng)
        await eng.load()
        return eng

    yield make
    for eng in made:
        await eng.aclose()


def chat(text: str, **params: Any) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", text),), params=SamplingParams(**params))


async def run(eng: OpenAIEngine, request: GenerationRequest) -> list[EngineEvent]:
    return [e async for e in eng.stream(eng.prepare(request, 64))]


def text_of(events: list[EngineEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, EngineText))


async def eventually(condition: Callable[[], bool], what: str, within_s: float = 20.0) -> None:
    """Waits for something another process or thread does (a bound, not a measurement)."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)


# ---- the engine, in process ------------------------------------------------------------


async def test_streams_text_and_usage_and_passes_every_parameter(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    assert eng.info.model_id == "fault-model"  # discovered from GET /v1/models
    assert eng.info.context_tokens == 4096  # its max_model_len
    request = chat("hi", max_tokens=32, temperature=0.7, top_p=0.9, top_k=40, min_p=0.05,
                   repetition_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.25,
                   seed=7, stop=("zzz",))
    events = await run(eng, request)
    assert events[0] == EngineStart(None)  # the prompt is counted upstream, at the end
    assert text_of(events) == expected_text()
    assert events[-1] == EngineFinish(FinishReason.STOP, _usage(len(PIECES)))
    sent = upstream.bodies[-1]
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert {k: sent[k] for k in ("model", "max_tokens", "temperature", "top_p", "top_k",
                                  "min_p", "repetition_penalty", "presence_penalty",
                                  "frequency_penalty", "seed", "stop")} == {
        "model": "fault-model", "max_tokens": 32, "temperature": 0.7, "top_p": 0.9,
        "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5,
        "frequency_penalty": 0.25, "seed": 7, "stop": ["zzz"]}


def _usage(completion: int) -> Any:
    from tokenpipe.types import Usage

    return Usage(PROMPT_TOKENS, completion)


async def test_neutral_extras_are_not_sent_and_raw_prompts_use_completions(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url + "/v1/", model="fault-model", model_id="alias")
    assert eng.info.model_id == "alias"
    events = await run(eng, GenerationRequest(prompt="Once [[tokens=3]]",
                                              params=SamplingParams(max_tokens=3)))
    assert text_of(events) == expected_text(3)
    assert events[-1] == EngineFinish(FinishReason.LENGTH, _usage(3))
    sent = upstream.bodies[-1]
    assert sent["prompt"] == "Once [[tokens=3]]" and sent["model"] == "fault-model"
    assert not {"top_k", "min_p", "repetition_penalty", "seed", "stop"} & set(sent)


async def test_an_upstream_that_refuses_return_token_ids_is_asked_without_it(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    """OpenAI's own API refuses a field it does not know: the request goes again at once
    without vLLM's `return_token_ids` (the client sees nothing of it), and that upstream is
    not asked for ids again (its answers move as text)."""
    upstream.refuses_token_ids = True
    eng = await engine(upstream.url)
    for _ in range(2):
        events = await run(eng, chat("hi", max_tokens=32))
        assert text_of(events) == expected_text()
    assert ["return_token_ids" in b for b in upstream.bodies] == [True, False, False]


async def test_usage_counts_tokens_that_arrived_several_to_a_chunk(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    events = await run(eng, chat("[[per_chunk=3]]", max_tokens=20))
    assert text_of(events) == expected_text()
    assert sum(e.tokens for e in events if isinstance(e, EngineText)) == len(PIECES)
    assert events[-1] == EngineFinish(FinishReason.STOP, _usage(len(PIECES)))


async def test_load_fails_clearly_when_the_upstream_is_down(engine: EngineFactory) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match=rf"upstream {url} unreachable: ConnectError"):
        await engine(url)


async def test_load_needs_a_model_the_upstream_serves(engine: EngineFactory,
                                                      upstream: FaultUpstream) -> None:
    with pytest.raises(EngineError, match="serves fault-model, not other"):
        await engine(upstream.url, model="other")
    several = FaultUpstream(extra_models=("second",)).start()
    try:
        with pytest.raises(EngineError, match="choose one with --model"):
            await engine(several.url)
        eng = await engine(several.url, model="second")
        assert eng.info.model_id == "second"
    finally:
        several.stop()


@pytest.mark.parametrize(("directive", "error", "match"), [
    ("[[status=400]][[context]]", ContextOverflow, "maximum context length"),
    ("[[status=400]]", BadRequest, "injected 400"),
    ("[[status=404]]", UnknownModel, "does not exist"),
    ("[[status=500]]", EngineError, "answered 500: injected 500"),
])
async def test_refusals_before_the_first_token_keep_their_meaning(
    engine: EngineFactory, upstream: FaultUpstream, directive: str,
    error: type[Exception], match: str,
) -> None:
    eng = await engine(upstream.url)
    with pytest.raises(error, match=match) as caught:
        await run(eng, chat(directive))
    assert type(caught.value) is error
    if isinstance(caught.value, BadRequest) and error is BadRequest:
        assert caught.value.param == "temperature"  # the upstream's word for what to fix


async def test_429_is_overloaded_with_the_upstreams_retry_after(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    with pytest.raises(Overloaded) as caught:
        await run(eng, chat("[[status=429]][[retry_after=7]]"))
    assert caught.value.retry_after_ms == 7000


@pytest.mark.parametrize(("fault", "k"), [
    ({"die_after": 3}, 3), ({"error_after": 2}, 2), ({"stall_after": 2}, 2)],
    ids=["dies", "error-event", "silent"])
async def test_an_answer_broken_mid_way_goes_on_on_another_replica(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream,
    fault: dict[str, int], k: int,
) -> None:
    """A replica that drops the stream, sends an error event or goes silent after its
    first token: the next one continues the answer from the text so far (an assistant
    prefill, vLLM's two flags), with the same sampling and what is left of max_tokens;
    the stream goes on as one answer, usage as if uninterrupted."""
    eng = await engine(upstream.url, upstream_b.url, idle_timeout_s=0.5)
    upstream.defaults = fault  # replica a only
    eng.replicas.turn = 0  # the answer begins on replica a
    events = await run(eng, chat("hi", max_tokens=64, temperature=0.5, seed=7))
    assert text_of(events) == expected_text()
    assert events[-1] == EngineFinish(FinishReason.STOP, _usage(len(PIECES)))
    assert sum(e.tokens for e in events if isinstance(e, EngineText)) == len(PIECES)
    first, going_on = upstream.bodies[-1], upstream_b.bodies[-1]
    assert "continue_final_message" not in first and first["max_tokens"] == 64
    assert going_on["messages"] == [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": expected_text(k)}]
    assert going_on["continue_final_message"] is True
    assert going_on["add_generation_prompt"] is False
    assert {key: going_on[key] for key in ("max_tokens", "temperature", "seed")} == {
        "max_tokens": 64 - k, "temperature": 0.5, "seed": 7}
    assert [r.in_flight for r in eng.replicas] == [0, 0]


async def test_a_raw_prompt_goes_on_with_the_text_appended(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream
) -> None:
    eng = await engine(upstream.url, upstream_b.url)
    upstream.defaults = {"die_after": 4}
    eng.replicas.turn = 0
    events = await run(eng, GenerationRequest(prompt="Once", params=SamplingParams(
        max_tokens=6)))
    assert text_of(events) == expected_text(6)
    assert events[-1] == EngineFinish(FinishReason.LENGTH, _usage(6))
    going_on = upstream_b.bodies[-1]
    assert going_on["prompt"] == "Once" + expected_text(4) and going_on["max_tokens"] == 2
    assert "continue_final_message" not in going_on


@pytest.mark.parametrize(("request_", "options", "directive"), [
    (GenerationRequest(messages=(Message("user", "hi"),), tools=(Tool("f"),)), {}, ""),
    (GenerationRequest(messages=(Message("user", "hi"),),
                       format=OutputFormat("json_schema", '{"type": "object"}')), {}, ""),
    (GenerationRequest(messages=(Message("user", "hi"),)), {}, "[[reasoning=2]]"),
    (GenerationRequest(messages=(Message("user", "hi"),), split_reasoning=True), {},
     "[[think]]"),
    (GenerationRequest(messages=(Message("user", "hi"),)), {"continue_answers": False}, ""),
], ids=["tools", "json-schema", "reasoning-content", "thinking-section", "mid-answer-fail"])
async def test_an_answer_that_would_not_go_on_the_same_ends_with_engine_error(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream,
    request_: GenerationRequest, options: dict[str, Any], directive: str,
) -> None:
    """Calls may come, a grammar binds the answer, a thinking section came (apart or in
    the content), or --upstream-mid-answer fail: the text so far, then engine_error; never
    a continuation that could differ."""
    eng = await engine(upstream.url, upstream_b.url, **options)
    upstream.defaults = {"die_after": 3}
    eng.replicas.turn = 0
    if directive:
        request_ = dataclasses.replace(request_, messages=(Message("user", directive),))
    texts: list[str] = []
    with pytest.raises(EngineError, match=r"failed mid-answer after [34] tokens") as caught:
        async for event in eng.stream(eng.prepare(request_, 64)):
            if isinstance(event, EngineText):
                texts.append(event.text)
    assert "".join(texts).removeprefix("<think>") == expected_text(3)
    assert "could go on" not in caught.value.message
    assert len(upstream.bodies) == 1 and not upstream_b.bodies  # never restarted elsewhere


@pytest.mark.parametrize(("fault_b", "why_b"), [
    ({"status": 500}, "answered 500: injected 500"),
    ({"status": 400}, "injected 400"),  # an upstream that refuses vLLM's flags (OpenAI's)
    ({"die_after": 2}, "closed the stream mid-answer after 2 tokens|failed mid-answer after 2"),
], ids=["5xx", "refused", "broke-too"])
async def test_an_answer_no_replica_can_go_on_with_ends_with_engine_error(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream,
    fault_b: dict[str, int], why_b: str,
) -> None:
    """Each replica serves an answer once: a continuation refused, or broken too, ends it
    (both reasons said) after the text sent, without coming back to the first replica."""
    eng = await engine(upstream.url, upstream_b.url)
    upstream.defaults, upstream_b.defaults = {"die_after": 3}, fault_b
    eng.replicas.turn = 0
    texts: list[str] = []
    with pytest.raises(EngineError, match=rf"failed mid-answer after 3 tokens.*, and no "
                                          rf"other upstream could go on with the answer: "
                                          rf".*({why_b})"):
        async for event in eng.stream(eng.prepare(chat("hi"), 64)):
            if isinstance(event, EngineText):
                texts.append(event.text)
    assert "".join(texts) == expected_text(3 + fault_b.get("die_after", 0))
    assert len(upstream.bodies) == len(upstream_b.bodies) == 1


def self_signed(tmp_path: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command."""
    cert, key = tmp_path / "upstream.pem", tmp_path / "upstream.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


async def test_https_upstream_trusted_through_ssl_cert_file(
    engine: EngineFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    secure = FaultUpstream(tls=(cert, key)).start()
    try:
        # Not trusted: refused at load, with the TLS reason in the message.
        with pytest.raises(EngineError, match=r"unreachable: ConnectError.*certificate"):
            await engine(secure.url)
        # A private CA (here the certificate itself) trusted the OpenSSL way.
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        eng = await engine(secure.url)
        for _ in range(2):  # the second request reuses the pooled TLS connection
            events = await run(eng, chat("hello"))
            assert text_of(events) == expected_text()
        assert len(secure.bodies) == 2
    finally:
        secure.stop()


async def test_no_first_token_in_time_is_engine_error(engine: EngineFactory,
                                                      upstream: FaultUpstream) -> None:
    eng = await engine(upstream.url, first_token_timeout_s=0.5)
    with pytest.raises(EngineError, match=r"no token within the first-token timeout of 0\.5 s"):
        await run(eng, chat("[[first_ms=5000]]"))
    await eventually(lambda: upstream.open_streams == 0, "the slow upstream stream closed")


async def test_closing_the_stream_closes_the_upstream_request(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    before = upstream.disconnects
    stream = eng.stream(eng.prepare(chat("[[stall_after=2]]"), 64))
    async for event in stream:
        if isinstance(event, EngineText):
            break
    assert upstream.open_streams == 1
    await stream.aclose()
    await eventually(lambda: upstream.disconnects == before + 1, "the upstream saw it go")
    assert upstream.open_streams == 0
    assert eng.replicas[0].in_flight == 0


async def test_cancelling_the_consumer_closes_the_upstream_request(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    got = asyncio.Event()

    async def consume() -> None:
        async for event in eng.stream(eng.prepare(chat("[[stall_after=1]]"), 64)):
            if isinstance(event, EngineText):
                got.set()

    task = asyncio.create_task(consume())
    await got.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await eventually(lambda: upstream.open_streams == 0, "the upstream stream closed")
    assert text_of(await run(eng, chat("again"))) == expected_text()


async def _idle_connection(eng: OpenAIEngine, upstream: FaultUpstream) -> None:
    assert text_of(await run(eng, chat("warm"))) == expected_text()
    origin = eng._origins[upstream.url]
    await eventually(lambda: bool(origin._idle), "a kept-alive connection back in the pool")


async def test_begin_sends_the_request_before_its_stream_runs(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    await _idle_connection(eng, upstream)
    sent = len(upstream.bodies)
    prepared = eng.prepare(chat("[[stall_after=3]]"), 64)
    eng.begin(prepared)  # what the scheduler does when it admits a request at once
    assert eng.replicas[0].in_flight == 1
    await eventually(lambda: upstream.open_streams == 1, "the upstream answering it already")
    stream = eng.stream(prepared)
    texts = []
    async for event in stream:
        if isinstance(event, EngineText):
            texts.append(event.text)
            if len(texts) == 3:
                break
    assert "".join(texts) == expected_text(3)
    assert len(upstream.bodies) == sent + 1  # the stream took over that request: sent once
    await stream.aclose()
    await eventually(lambda: upstream.open_streams == 0, "the upstream stream closed")
    assert eng.replicas[0].in_flight == 0


async def test_a_begun_request_never_streamed_is_closed_upstream(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    await _idle_connection(eng, upstream)
    for how in ("forget", "closed at its start"):
        before = upstream.disconnects
        prepared = eng.prepare(chat("[[stall_after=1]]"), 64)
        eng.begin(prepared)
        await eventually(lambda: upstream.open_streams == 1, "the upstream answering it")
        if how == "forget":  # the scheduler: cancelled before its task ran
            eng.forget(prepared)
        else:
            stream = eng.stream(prepared)
            assert await anext(stream) == EngineStart(None)
            await stream.aclose()
        gone = before + 1
        await eventually(lambda: upstream.disconnects == gone,  # noqa: B023 - awaited here
                         f"{how}: the upstream saw its client go")
        assert eng.replicas[0].in_flight == 0
        await eventually(lambda: bool(eng._origins[upstream.url]._idle), "a spare instead")
    assert text_of(await run(eng, chat("again"))) == expected_text()


async def test_begin_sends_nothing_on_a_dead_idle_connection_and_the_stream_connects(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    eng = await engine(upstream.url)
    await _idle_connection(eng, upstream)
    prepared = eng.prepare(chat("hi"), 64)
    conn = eng._origins[upstream.url]._idle[-1]
    assert conn.transport is not None
    conn.transport.abort()  # as if the upstream had closed it; not yet noticed
    eng.begin(prepared)
    assert not eng._begun  # nothing sent: the only idle connection was unusable
    assert eng.replicas[0].in_flight == 0
    assert text_of([e async for e in eng.stream(prepared)]) == expected_text()
    assert eng.replicas[0].in_flight == 0


# ---- replicas ---------------------------------------------------------------------------


async def test_requests_go_to_the_least_busy_replica(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream
) -> None:
    eng = await engine(upstream.url, upstream_b.url)
    streams = [eng.stream(eng.prepare(chat("[[stall_after=1]]"), 64)) for _ in range(4)]
    for stream in streams:  # each holds its replica until closed
        async for event in stream:
            if isinstance(event, EngineText):
                break
    assert upstream.open_streams == upstream_b.open_streams == 2
    assert [r.in_flight for r in eng.replicas] == [2, 2]
    for stream in streams:
        await stream.aclose()
    assert [r.in_flight for r in eng.replicas] == [0, 0]


@pytest.mark.parametrize("fault", ["[[status=500]]", "[[status=503]]", "[[status=429]]",
                                   "[[die_after=0]]", "[[error_after=0]]", "[[first_ms=3000]]"])
async def test_a_failure_before_the_first_token_moves_to_the_next_replica(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream, fault: str
) -> None:
    eng = await engine(upstream.url, upstream_b.url, first_token_timeout_s=1.0)
    upstream.defaults = {m[1]: int(m[2] or 0) for m in _DIRECTIVE.finditer(fault)}
    eng.replicas.turn = 0  # the first try goes to replica a
    events = await run(eng, chat("hi"))
    assert text_of(events) == expected_text()
    assert len(upstream.bodies) == len(upstream_b.bodies) == 1


async def test_a_replica_that_is_down_is_skipped_and_comes_back(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream
) -> None:
    eng = await engine(upstream.url, upstream_b.url)
    upstream.health_status = 503
    await eventually(lambda: not eng.replicas[0].healthy, "replica a marked down")
    assert eng.healthy()
    for _ in range(3):
        assert text_of(await run(eng, chat("hi"))) == expected_text()
    assert not upstream.bodies and len(upstream_b.bodies) == 3
    upstream_b.health_status = 503
    await eventually(lambda: not eng.healthy(), "no replica healthy")
    with pytest.raises(EngineUnavailable, match="no healthy upstream"):
        await run(eng, chat("hi"))
    upstream.health_status = 200
    await eventually(eng.healthy, "replica a healthy again")
    assert text_of(await run(eng, chat("hi"))) == expected_text()


async def test_every_replica_failing_is_one_clear_error(
    engine: EngineFactory, upstream: FaultUpstream, upstream_b: FaultUpstream
) -> None:
    eng = await engine(upstream.url, upstream_b.url)
    upstream.defaults = upstream_b.defaults = {"status": 500}
    with pytest.raises(EngineError, match=r"every upstream failed: .*500.*; .*500"):
        await run(eng, chat("hi"))
    upstream.defaults = upstream_b.defaults = {"status": 429, "retry_after": 3}
    with pytest.raises(Overloaded) as caught:
        await run(eng, chat("hi"))
    assert caught.value.retry_after_ms == 3000


async def test_a_replica_down_at_start_joins_once_it_serves_the_model(
    engine: EngineFactory, upstream: FaultUpstream
) -> None:
    later = FaultUpstream(model="another-model")
    try:
        eng = await engine(upstream.url, later.url)
        assert [r.healthy for r in eng.replicas] == [True, False]
        assert "unreachable" in eng.replicas[1].why
        later.start()
        await eventually(lambda: "serves another-model, not fault-model"
                         in eng.replicas[1].why, "replica b checked")
        assert not eng.replicas[1].healthy  # up, but not serving our model
        later.model = "fault-model"
        await eventually(lambda: eng.replicas[1].healthy, "replica b joined")
        eng.replicas.turn = 1
        assert text_of(await run(eng, chat("hi"))) == expected_text()
        assert later.bodies and not upstream.bodies
    finally:
        later.stop()


async def test_the_upstream_key_is_sent(engine: EngineFactory) -> None:
    locked = FaultUpstream(key="sekrit").start()
    try:
        with pytest.raises(EngineError, match="answered 401 to GET /v1/models"):
            await engine(locked.url)
        eng = await engine(locked.url, api_key="sekrit")
        assert text_of(await run(eng, chat("hi"))) == expected_text()
    finally:
        locked.stop()


def test_prepare_refuses_only_what_is_sure_without_a_tokenizer() -> None:
    eng = OpenAIEngine(["http://127.0.0.1:9"], context_tokens=100)
    prepared = eng.prepare(chat("word " * 1000), 64)  # the upstream judges the prompt
    assert isinstance(prepared, PreparedRequest) and prepared.prompt_tokens == 0
    assert prepared.max_tokens == 64
    with pytest.raises(ContextOverflow):
        eng.prepare(chat("hi", max_tokens=100), 64)


# ---- through a tokenpipe server: every frame of the protocol ----------------------------


@pytest.fixture(scope="module")
def fake_upstream() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--max-streams-per-connection", "8"))
                 ) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(fake_upstream: ServerProcess) -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "openai", "--upstream", fake_upstream.url,
                                "--parallel", "2", "--max-streams-per-connection", "8",
                                "--upstream-idle-timeout-s", "2"))) as server:
        yield server


async def test_proxy_streams_what_the_upstream_streams(
    proxy: ServerProcess, fake_upstream: ServerProcess
) -> None:
    async with httpx.AsyncClient() as http:
        models = (await http.get(proxy.url + "/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["fake"]
    async with Client(proxy.ws_url) as via, Client(fake_upstream.ws_url) as direct:
        a = await via.generate([{"role": "user", "content": "hello"}],
                               params={"max_tokens": 500})
        b = await direct.generate([{"role": "user", "content": "hello"}],
                                  params={"max_tokens": 500})
        assert await a.collect() == await b.collect() == SCRIPT
    assert a.start is not None and a.start["prompt_tokens"] is None
    assert a.end is not None and b.end is not None
    assert a.end["usage"] == b.end["usage"]  # the upstream's count, prompt included
    assert a.end["finish_reason"] == "stop"
    assert [d["seq"] for d in a.deltas] == list(range(len(a.deltas)))
    assert all(d["text"] and "\ufffd" not in d["text"] for d in a.deltas)


async def test_proxy_multiplexes_applies_stop_and_queues(proxy: ServerProcess) -> None:
    async with Client(proxy.ws_url) as client:
        gens = [await client.generate(
            [{"role": "user", "content": f"[[echo]][[pace_ms=20]] {i} ünï 🎉"}],
            params={"max_tokens": 50}) for i in range(4)]
        texts = await asyncio.gather(*(g.collect() for g in gens))
        assert texts == [f"{i} ünï 🎉" for i in range(4)]
        assert any(g.queued for g in gens[2:])  # --parallel 2: the rest waited, in order
        stop = await client.generate([{"role": "user", "content": "hi"}],
                                     params={"max_tokens": 200, "stop": ["streamed"]})
        assert await stop.collect() == "Hello! Here is a "
        assert stop.end is not None and stop.end["finish_reason"] == "stop"


async def test_proxy_reports_an_upstream_fault_mid_answer(proxy: ServerProcess) -> None:
    async with Client(proxy.ws_url) as client:
        gen = await client.generate([{"role": "user", "content": "[[fail_after=5]]"}])
        with pytest.raises(ServerError) as caught:
            await gen.collect()
        assert caught.value.code == "engine_error"
        assert gen.text == SCRIPT[: len(gen.text)] and gen.text
        before = await client.generate([{"role": "user", "content": "[[fail_after=0]]"}])
        with pytest.raises(ServerError) as caught:
            await before.collect()
        assert caught.value.code == "engine_error" and not before.deltas
        ok = await client.generate([{"role": "user", "content": "[[tokens=4]]"}])
        assert await ok.collect() == "Hello! "  # the fake's tokens are 1 to 3 bytes
        assert ok.end is not None and ok.end["usage"]["completion_tokens"] == 4


async def test_proxy_openai_api_and_resume(proxy: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=proxy.url) as http:
        answer = (await http.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "[[echo]] via http"}],
            "temperature": 0})).json()
    assert answer["choices"][0]["message"]["content"] == "via http"
    assert answer["usage"]["prompt_tokens"] > 0
    _, resumed, text = await drop_and_resume(proxy.ws_url)
    assert SCRIPT.startswith(text) and len(text) > 40
    assert resumed.end is not None and resumed.end["finish_reason"] == "length"
    assert resumed.end["usage"]["completion_tokens"] == 40


async def test_proxy_cancel_closes_the_upstream_request(
    upstream: FaultUpstream, live_server: Callable[..., str], fresh: None
) -> None:
    url = live_server("--engine", "openai", "--upstream", upstream.url)
    async with Client(url.replace("http", "ws") + "/ws") as client:
        gen = await client.generate([{"role": "user", "content": "[[stall_after=2]]"}])
        async for _ in gen:
            break
        assert upstream.open_streams == 1
        await gen.cancel()
        await gen.collect()
        assert gen.end is not None and gen.end["finish_reason"] == "cancelled"
        await eventually(lambda: upstream.open_streams == 0, "the upstream request closed")
        gen = await client.generate([{"role": "user", "content": "[[status=429]]"
                                                                 "[[retry_after=4]]"}])
        with pytest.raises(ServerError) as caught:
            await gen.collect()
        assert caught.value.code == "overloaded"
        assert caught.value.frame["retry_after_ms"] == 4000
    # A client that just goes away (a closed WebSocket, a dropped event stream) does the same.
    before = upstream.disconnects
    async with Client(url.replace("http", "ws") + "/ws") as client:
        gen = await client.generate([{"role": "user", "content": "[[stall_after=1]]"}])
        async for _ in gen:
            break
    async with httpx.AsyncClient(base_url=url) as http, http.stream(
            "POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "[[stall_after=1]]"}],
                "stream": True}) as response:
        async for raw in response.aiter_raw():
            if b'"content":"Hello"' in raw:
                break
    await eventually(lambda: upstream.disconnects == before + 2, "both upstream requests closed")
    assert upstream.open_streams == 0


def test_proxy_health_follows_the_upstream(upstream: FaultUpstream, fresh: None) -> None:
    down = ServerProcess(("--engine", "openai", "--upstream", f"http://127.0.0.1:{free_port()}"))
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                health = httpx.get(down.url + "/health", timeout=2)
                if health.json().get("status") == "error":
                    break
            assert time.monotonic() < deadline, down.log()
            time.sleep(0.1)
        assert health.status_code == 503
        assert "unreachable" in health.json()["error"]
    finally:
        down.stop()
    proxy = ServerProcess(("--engine", "openai", "--upstream", upstream.url))
    try:
        proxy.wait_ready()
        upstream.health_status = 503
        deadline = time.monotonic() + 30
        while httpx.get(proxy.url + "/health").status_code != 503:
            assert time.monotonic() < deadline, "the proxy never noticed"
            time.sleep(0.1)
    finally:
        proxy.stop()
