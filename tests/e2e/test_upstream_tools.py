"""Tool calls through the openai engine, against a scripted upstream (the gateway's own
behaviour): each script streams the calls in a shape some OpenAI-compatible server sends
(OpenAI's own, a call's whole arguments in one delta, the id only once or never, indexes
with gaps or none, arguments before the name), and a tokenpipe server with
`--engine openai` in front of it must re-stream them well-formed to the official openai
SDK: each call's first delta has index, id, type and name; indexes 0, 1, ...; ids stable;
the arguments whole and JSON before `finish_reason: tool_calls`; arguments that are not
JSON fail the answer with a clear error."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import ServerProcess, closed_after_test, free_port, running
from tokenpipe.client import Client

pytestmark = pytest.mark.e2e

MODEL = "scripted"
WEATHER = '{"city": "Paris", "unit": "C"}'
SEARCH = '{"query": "lighthouses \\u00e9 \\"quoted\\""}'
TOOLS: Any = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"enum": ["C", "F"]}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}},
]


def call(index: int | None = None, id_: str | None = None, name: str | None = None,
         args: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if index is not None:
        d["index"] = index
    if id_ is not None:
        d.update(id=id_, type="function")
    function = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    if function:
        d["function"] = function
    return d


# Each script: the chunks' deltas in order, then the finish reason.
SCRIPTS: dict[str, tuple[list[dict[str, Any]], str]] = {
    "openai": ([  # OpenAI's own shape, two calls
        {"tool_calls": [call(0, "call_a", "get_weather", "")]},
        *({"tool_calls": [call(0, args=WEATHER[i:i + 5])]} for i in range(0, len(WEATHER), 5)),
        {"tool_calls": [call(1, "call_b", "search", "")]},
        *({"tool_calls": [call(1, args=SEARCH[i:i + 7])]} for i in range(0, len(SEARCH), 7)),
    ], "tool_calls"),
    "one_delta": ([  # each call whole in one delta, both in one chunk
        {"tool_calls": [call(0, "call_a", "get_weather", WEATHER),
                        call(1, "call_b", "search", SEARCH)]},
    ], "tool_calls"),
    "gaps_id_once": ([  # indexes 1 and 3; the id only on a call's first delta
        {"tool_calls": [call(1, "call_a", "get_weather")]},
        {"tool_calls": [call(1, args=WEATHER[:9])]},
        {"tool_calls": [call(3, "call_b", "search", SEARCH[:4])]},
        {"tool_calls": [call(1, args=WEATHER[9:])]},
        {"tool_calls": [call(3, args=SEARCH[4:])]},
    ], "tool_calls"),
    "args_first": ([  # arguments before the name, the id last; finish "stop"
        {"tool_calls": [call(0, args=WEATHER[:6])]},
        {"tool_calls": [call(0, args=WEATHER[6:12])]},
        {"tool_calls": [call(0, name="get_weather")]},
        {"tool_calls": [call(0, "call_late", args=WEATHER[12:])]},
    ], "stop"),
    "no_index_no_id": ([  # no index, no id: one call after the other
        {"tool_calls": [call(name="get_weather", args=WEATHER)]},
        {"tool_calls": [call(name="search", args=SEARCH[:10])]},
        {"tool_calls": [call(args=SEARCH[10:])]},
    ], "tool_calls"),
    "same_index_new_id": ([  # every call numbered 0, told apart by their ids
        {"tool_calls": [call(0, "call_a", "get_weather", WEATHER)]},
        {"tool_calls": [call(0, "call_b", "search", SEARCH)]},
    ], "tool_calls"),
    "content_then_call": ([
        {"content": "Let me look. "},
        {"tool_calls": [call(0, "call_a", "get_weather", WEATHER)]},
    ], "tool_calls"),
    "no_arguments": ([{"tool_calls": [call(0, "call_a", "get_weather", "")]}], "tool_calls"),
    "not_json": ([
        {"tool_calls": [call(0, "call_a", "get_weather", '{"city": "Par')]},
        {"tool_calls": [call(0, args="is")]},
    ], "tool_calls"),
    "no_name": ([{"tool_calls": [call(0, "call_a", args=WEATHER)]}], "tool_calls"),
    "cut": ([{"tool_calls": [call(0, "call_a", "get_weather", WEATHER[:10])]}], "length"),
}
# What the client must get: (name, arguments) per call, in index order.
EXPECTED = {
    "openai": [("get_weather", WEATHER), ("search", SEARCH)],
    "one_delta": [("get_weather", WEATHER), ("search", SEARCH)],
    "gaps_id_once": [("get_weather", WEATHER), ("search", SEARCH)],
    "args_first": [("get_weather", WEATHER)],
    "no_index_no_id": [("get_weather", WEATHER), ("search", SEARCH)],
    "same_index_new_id": [("get_weather", WEATHER), ("search", SEARCH)],
    "content_then_call": [("get_weather", WEATHER)],
    "no_arguments": [("get_weather", "{}")],
}
UPSTREAM_IDS = {"openai": ["call_a", "call_b"], "one_delta": ["call_a", "call_b"],
                "gaps_id_once": ["call_a", "call_b"], "args_first": ["call_late"],
                "same_index_new_id": ["call_a", "call_b"], "content_then_call": ["call_a"]}


class ScriptedUpstream:
    """An OpenAI-compatible upstream that streams SCRIPTS[name], the name in the last
    user message; it keeps each request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.pace_s = 0.0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/v1/models", self._models),
                                Route("/v1/chat/completions", self._chat, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="critical", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ScriptedUpstream:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the scripted upstream did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.bodies.append(body)
        user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        name, _, pace = user.partition("@")  # "script@slow": 50 ms between chunks
        deltas, finish = SCRIPTS[name]
        self.pace_s = 0.05 if pace == "slow" else 0.0
        return StreamingResponse(self._events(deltas, finish), media_type="text/event-stream")

    async def _events(self, deltas: list[dict[str, Any]], finish: str
                      ) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
            obj = {"id": "x", "object": "chat.completion.chunk", "model": MODEL,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        yield chunk({"role": "assistant", "content": None})
        for delta in deltas:
            yield chunk(delta)
            await asyncio.sleep(self.pace_s)
        yield chunk({}, finish)
        usage = {"prompt_tokens": 11, "completion_tokens": len(deltas),
                 "total_tokens": 11 + len(deltas)}
        yield b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode()
        yield b"\n\ndata: [DONE]\n\n"


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[ServerProcess]:
    db = tmp_path_factory.mktemp("responses") / "r.sqlite3"
    with running(ServerProcess(("--engine", "openai", "--upstream", upstream.url,
                                "--upstream-idle-timeout-s", "5", "--responses-db", str(db)))
                 ) as server:
        yield server


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="unused",
                                           max_retries=0,
                                           timeout=30))


def ask(script: str) -> Any:
    return [{"role": "user", "content": script}]


def streamed_calls(chunks: list[Any]) -> tuple[list[tuple[str, str]], list[str], str | None,
                                               str]:
    """(name, arguments) per index, ids, the finish reason and the content, checking the
    shape of every delta on the way."""
    calls: dict[int, dict[str, Any]] = {}
    finish, content = None, ""
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for d in choice.delta.tool_calls or []:
            if d.index not in calls:  # a call's first delta: index, id, type and name
                assert d.id and d.type == "function" and d.function and d.function.name
                assert d.index == len(calls), "indexes are dense, in order"
                calls[d.index] = {"id": d.id, "name": d.function.name, "args": ""}
            else:
                assert d.id is None and (d.function is None or d.function.name is None)
            calls[d.index]["args"] += (d.function.arguments or "") if d.function else ""
        if choice.finish_reason:
            assert finish is None
            finish = choice.finish_reason
            for c in calls.values():  # every call is whole before the finish
                assert isinstance(json.loads(c["args"]), dict)
    ordered = [calls[i] for i in sorted(calls)]
    return ([(c["name"], c["args"]) for c in ordered], [c["id"] for c in ordered], finish,
            content)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_every_upstream_shape_streams_well_formed_calls(gateway: ServerProcess,
                                                        script: str) -> None:
    c = sdk(gateway)
    chunks = list(c.chat.completions.create(model=MODEL, messages=ask(script), tools=TOOLS,
                                            stream=True))
    calls, ids, finish, content = streamed_calls(chunks)
    assert finish == "tool_calls"
    assert [(n, json.loads(a)) for n, a in calls] == [
        (n, json.loads(a)) for n, a in EXPECTED[script]]
    assert len(set(ids)) == len(ids)
    if script in UPSTREAM_IDS:
        assert ids == UPSTREAM_IDS[script]  # the upstream's ids are kept
    else:
        assert all(i.startswith("call_") for i in ids)  # ours where it sent none
    assert content == ("Let me look. " if script == "content_then_call" else "")

    whole = c.chat.completions.create(model=MODEL, messages=ask(script), tools=TOOLS)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls"
    got = [(t.function.name, json.loads(t.function.arguments))
           for t in choice.message.tool_calls or []]
    assert got == [(n, json.loads(a)) for n, a in EXPECTED[script]]
    if script in UPSTREAM_IDS:
        assert [t.id for t in choice.message.tool_calls or []] == UPSTREAM_IDS[script]


async def test_the_same_calls_arrive_over_tokenpipe_v1(gateway: ServerProcess) -> None:
    async with Client(gateway.ws_url) as client:
        gen = await client.generate(ask("gaps_id_once"), params={"tools": TOOLS})
        await gen.collect()
    assert gen.end is not None and gen.end["finish_reason"] == "tool_calls"
    calls = [d for d in gen.deltas if d.get("channel") == "tool_call"]
    firsts = [d for d in calls if "call_id" in d]
    assert [(d["index"], d["call_id"], d["name"]) for d in firsts] == [
        (0, "call_a", "get_weather"), (1, "call_b", "search")]
    for i, expected in enumerate((WEATHER, SEARCH)):
        assert "".join(d["text"] for d in calls if d["index"] == i) == expected
    assert [d["seq"] for d in gen.deltas] == list(range(len(gen.deltas)))


@pytest.mark.parametrize(("script", "words"), [
    ("not_json", "arguments for tool call 0 (get_weather) that are not JSON"),
    ("no_name", "tool call 0 without a function name")])
def test_a_malformed_call_fails_the_answer_clearly(gateway: ServerProcess, script: str,
                                                   words: str) -> None:
    r = httpx.post(gateway.url + "/v1/chat/completions", timeout=30, json={
        "model": MODEL, "messages": ask(script), "tools": TOOLS})
    assert r.status_code == 500, r.text
    assert words in r.json()["error"]["message"]
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", timeout=30, json={
            "model": MODEL, "messages": ask(script), "tools": TOOLS, "stream": True}) as s:
        s.read()
    if script == "no_name":  # nothing was sent before the failure: an error status
        assert s.status_code == 500 and words in s.json()["error"]["message"]
    else:  # part of the call was streamed: the error ends the stream, no finish_reason
        assert s.status_code == 200
        events = [line[6:] for line in s.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert words in json.loads(events[-2])["error"]["message"]
        assert any('"tool_calls"' in e for e in events[:-2])
        assert not any(json.loads(e)["choices"][0]["finish_reason"] for e in events[:-2]
                       if json.loads(e).get("choices"))
    # The server and its upstream connection serve the next answer as before.
    assert sdk(gateway).chat.completions.create(
        model=MODEL, messages=ask("one_delta"), tools=TOOLS).choices[0].finish_reason == (
        "tool_calls")


def test_a_call_cut_by_max_tokens_ends_with_length(gateway: ServerProcess) -> None:
    choice = sdk(gateway).chat.completions.create(model=MODEL, messages=ask("cut"),
                                                  tools=TOOLS).choices[0]
    assert choice.finish_reason == "length"
    calls = choice.message.tool_calls or []
    assert [(t.function.name, t.function.arguments) for t in calls] == [
        ("get_weather", WEATHER[:10])]


def test_tools_choice_and_the_history_go_upstream(gateway: ServerProcess,
                                                  upstream: ScriptedUpstream) -> None:
    history: Any = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": WEATHER}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
        {"role": "user", "content": "one_delta"},
    ]
    named = {"type": "function", "function": {"name": "search"}}
    for choice, parallel in (("required", False), (named, True), ("auto", True)):
        sdk(gateway).chat.completions.create(model=MODEL, messages=history, tools=TOOLS,
                                             tool_choice=choice, parallel_tool_calls=parallel)
        sent = upstream.bodies[-1]
        assert sent["tools"] == TOOLS
        assert sent["tool_choice"] == choice
        assert sent["parallel_tool_calls"] is (parallel and choice != named)  # named: one call
        assert sent["messages"][1:3] == [
            {"role": "assistant", "content": None, "tool_calls": history[1]["tool_calls"]},
            {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call_1"}]


RESPONSES_TOOLS: Any = [{"type": "function", "name": t["function"]["name"],
                         "parameters": t["function"]["parameters"]} for t in TOOLS]


@pytest.mark.parametrize("script", ["content_then_call", "openai"])
def test_responses_items_of_text_then_calls(gateway: ServerProcess, script: str) -> None:
    """The Responses door over the openai engine: text, then calls, each its own output
    item, whole and streamed alike, every item done before the next is added."""
    c = sdk(gateway)
    expected = [("function_call", n, json.loads(a)) for n, a in EXPECTED[script]]
    if script == "content_then_call":
        expected.insert(0, ("message", "Let me look. ", None))

    def items(response: Any) -> list[tuple[str, str, Any]]:
        return [("message", i.content[0].text, None) if i.type == "message" else
                ("function_call", i.name, json.loads(i.arguments)) for i in response.output]

    whole = c.responses.create(model=MODEL, input=script, tools=RESPONSES_TOOLS, store=False)
    assert whole.status == "completed" and items(whole) == expected
    with c.responses.stream(model=MODEL, input=script, tools=RESPONSES_TOOLS,
                            store=False) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert items(final) == expected
    assert [e.sequence_number for e in events] == list(range(len(events)))
    opened: list[int] = []
    for e in events:
        if e.type == "response.output_item.added":
            assert not opened or opened[-1] == -1  # the item before is done
            opened.append(e.output_index)
        elif e.type == "response.output_item.done":
            assert opened[-1] == e.output_index
            opened.append(-1)
    assert [i for i in opened if i >= 0] == list(range(len(expected)))
    ids = [i.call_id for i in final.output if i.type == "function_call"]
    assert ids == UPSTREAM_IDS[script]


def test_a_background_response_with_calls_resumes_and_replays_the_same_events(
        gateway: ServerProcess, upstream: ScriptedUpstream) -> None:
    """Dropped after a few events and resumed with starting_after: the events after N,
    nothing lost or repeated; once stored, the whole stream replays the same; the calls
    continue through previous_response_id."""
    c = sdk(gateway)
    first: list[Any] = []
    with c.responses.create(model=MODEL, input="openai@slow", tools=RESPONSES_TOOLS,
                            background=True, stream=True) as stream:
        for event in stream:
            first.append(event)
            if len(first) == 6:
                break  # the client drops mid-call
    response_id = first[0].response.id
    rest = list(c.responses.retrieve(response_id, stream=True,
                                     starting_after=first[-1].sequence_number))
    whole = first + rest
    assert [e.sequence_number for e in whole] == list(range(len(whole)))
    assert whole[-1].type == "response.completed"
    final = c.responses.retrieve(response_id)
    assert final.status == "completed"
    assert [(i.name, json.loads(i.arguments)) for i in final.output] == [
        (n, json.loads(a)) for n, a in EXPECTED["openai"]]
    assert whole[-1].response.output == final.output
    replayed = list(c.responses.retrieve(response_id, stream=True))  # from the store
    assert [e.model_dump() for e in replayed] == [e.model_dump() for e in whole]
    after = list(c.responses.retrieve(response_id, stream=True, starting_after=3))
    assert [e.model_dump() for e in after] == [e.model_dump() for e in whole[4:]]
    with pytest.raises(openai.BadRequestError):
        list(c.responses.retrieve(response_id, stream=True, starting_after=len(whole)))

    output: Any = {"type": "function_call_output", "call_id": "call_a", "output": "21 C"}
    c.responses.create(model=MODEL, input=[output, {"role": "user", "content": "one_delta"}],
                       previous_response_id=response_id, tools=RESPONSES_TOOLS)
    sent = upstream.bodies[-1]["messages"]
    assert sent[:3] == [
        {"role": "user", "content": "openai@slow"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in zip(UPSTREAM_IDS["openai"], EXPECTED["openai"], strict=True)]},
        {"role": "tool", "content": "21 C", "tool_call_id": "call_a"}]


def test_calls_an_upstream_sends_unasked_never_reach_a_client_that_offered_no_tools(
        gateway: ServerProcess) -> None:
    choice = sdk(gateway).chat.completions.create(model=MODEL,
                                                  messages=ask("content_then_call")
                                                  ).choices[0]
    assert choice.message.content == "Let me look. " and not choice.message.tool_calls
    assert choice.finish_reason == "stop"
