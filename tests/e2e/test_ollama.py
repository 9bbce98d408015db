"""Ollama's API (docs/protocol.md section 4) over real servers, with the official `ollama`
package as the client: the fake engine for shapes, options, errors, faults, the queue and
disconnects; the real model for the same text as the OpenAI door's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import openai
import pytest

from tests.conftest import ServerProcess, broken_model, closed_after_test, running
from tokenpipe.engines.fake import SCRIPT

pytestmark = pytest.mark.e2e

USER: Any = [{"role": "user", "content": "hello"}]


_OPEN: list[ollama.Client] = []


def client(server: ServerProcess, **kwargs: Any) -> ollama.Client:
    """An official client; closed after the test (it holds an httpx pool)."""
    _OPEN.append(ollama.Client(host=server.url, **kwargs))
    return _OPEN[-1]


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def metric(server: ServerProcess, name: str) -> float:
    """A counter or gauge from /metrics, summed over its labels (the model)."""
    text = httpx.get(server.url + "/metrics").text
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text,
                                            re.MULTILINE))


def ndjson(response: httpx.Response) -> list[Any]:
    assert response.text.endswith("\n")
    return [json.loads(line) for line in response.text.split("\n")[:-1]]


# ---- generation (fake engine) --------------------------------------------------------------


def test_chat_whole_and_streamed(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    whole = c.chat(model="fake", messages=USER, stream=False)
    assert whole.model == "fake" and whole.done and whole.done_reason == "stop"
    assert whole.message.role == "assistant" and whole.message.content == SCRIPT
    assert whole.eval_count and whole.prompt_eval_count
    assert whole.total_duration and whole.eval_duration is not None
    assert whole.total_duration >= (whole.load_duration or 0) + (whole.eval_duration or 0)
    parts = list(c.chat(model="fake", messages=USER, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content or "" for p in parts) == SCRIPT
    assert parts[-1].message.content == "" and parts[-1].done_reason == "stop"
    assert parts[-1].eval_count == whole.eval_count
    assert parts[-1].prompt_eval_count == whole.prompt_eval_count


def test_generate_whole_streamed_and_raw(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    whole = c.generate(model="fake", prompt="[[echo]] abc def", stream=False)
    assert whole.response == "abc def" and whole.done_reason == "stop"
    assert whole.context is None  # not sent: context is refused as input too
    parts = list(c.generate(model="fake", prompt="[[echo]] abc def", system="be brief",
                            stream=True))
    assert "".join(p.response or "" for p in parts) == "abc def" and parts[-1].done
    raw = c.generate(model="fake", prompt="[[echo]] raw text", raw=True)
    assert raw.response == "raw text"
    assert (raw.prompt_eval_count or 0) < (whole.prompt_eval_count or 0)  # no template


def test_the_stream_is_ndjson_and_streams(fake_server: ServerProcess) -> None:
    body = {"model": "fake", "messages": [{"role": "user", "content":
                                           "[[pace_ms=40]][[tokens=8]]"}]}
    arrivals = []
    t0 = time.monotonic()
    with httpx.stream("POST", fake_server.url + "/api/chat", json=body, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-ndjson"
        for line in r.iter_lines():
            if line:
                arrivals.append(time.monotonic() - t0)
                last = json.loads(line)
    assert last["done"] is True and len(arrivals) >= 5
    # a buffered answer would arrive at once; a slow machine only spreads the lines further
    assert arrivals[-2] - arrivals[0] >= 0.5 * 0.04 * 6
    # curl -d sends application/x-www-form-urlencoded: Ollama reads JSON regardless
    r = httpx.post(fake_server.url + "/api/generate", content=json.dumps(
        {"model": "fake", "prompt": "[[echo]] x", "stream": False}),
        headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.json()["response"] == "x"
    assert r.headers["content-type"] == "application/json; charset=utf-8"


def test_options_num_predict_stop_seed_temperature(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    short = c.chat(model="fake", messages=USER, options={"num_predict": 5})
    assert short.done_reason == "length" and short.eval_count == 5
    stop = SCRIPT[20:24]
    cut = c.generate(model="fake", prompt="hi", options={"stop": [stop], "num_predict": 200})
    assert cut.response == SCRIPT[:20] and cut.done_reason == "stop"
    options = ollama.Options(temperature=0.7, seed=3, top_k=20, top_p=0.8, min_p=0.05,
                             repeat_penalty=1.1, num_ctx=2048, num_thread=2)
    assert c.chat(model="fake", messages=USER, options=options).message.content == SCRIPT


async def test_async_client_streams(fake_server: ServerProcess) -> None:
    async with ollama.AsyncClient(host=fake_server.url) as c:
        stream = await c.chat(model="fake:latest", messages=USER, stream=True)
        parts = [part async for part in stream]
        whole = await c.generate(model="fake", prompt="[[echo]] async")
    assert "".join(p.message.content or "" for p in parts) == SCRIPT
    assert parts[-1].done and parts[-1].model == "fake:latest"
    assert whole.response == "async"


@pytest.fixture(scope="module")
def on_demand_server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--load-on-demand"))) as server:
        yield server


def test_load_call(on_demand_server: ServerProcess) -> None:
    c = client(on_demand_server)
    for loaded in (c.generate(model="fake"), c.chat(model="fake", messages=[])):
        assert loaded.done and loaded.done_reason == "load"
    assert [m.model for m in c.ps().models] == ["fake:latest"]
    unloaded = c.generate(model="fake", keep_alive=0)  # Ollama's "unload it now"
    assert unloaded.done and unloaded.done_reason == "unload" and c.ps().models == []
    assert c.generate(model="fake", prompt="[[echo]] back").response == "back"  # loads again
    assert [m.model for m in c.ps().models] == ["fake:latest"]
    with pytest.raises(ollama.ResponseError) as info:
        c.generate(model="nope")
    assert info.value.status_code == 404


def test_keep_alive_0_unloads_nothing_without_load_on_demand(fake_server: ServerProcess) -> None:
    """Models stay loaded unless the server lets them come and go: no client forces the
    reloads (each stalls the loop) that keep_alive 0 would."""
    c = client(fake_server)
    kept = c.generate(model="fake", keep_alive=0)
    assert kept.done and kept.done_reason == "load"  # the truth: it is loaded
    assert c.chat(model="fake", messages=USER, keep_alive=0).message.content == SCRIPT
    assert [m.model for m in c.ps().models] == ["fake:latest"]


# ---- models and probes ---------------------------------------------------------------------


def test_list_show_ps_version(fake_server: ServerProcess) -> None:
    c = client(fake_server)
    listed = c.list().models
    assert [m.model for m in listed] == ["fake:latest"]
    assert listed[0].details is not None and listed[0].modified_at is not None
    shown = c.show("fake")
    assert shown.capabilities == ["completion", "thinking"]  # the fake writes think tags
    assert shown.parameters == "num_ctx 8192"
    assert shown.modelinfo == {"tokenpipe.context_length": 8192}
    loaded = c.ps().models
    assert [m.model for m in loaded] == ["fake:latest"]
    assert loaded[0].expires_at is not None and loaded[0].context_length == 8192
    with pytest.raises(ollama.ResponseError) as info:
        c.show("llama3.2")
    assert info.value.status_code == 404 and info.value.error == "model 'llama3.2' not found"
    version = httpx.get(fake_server.url + "/api/version").json()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version["version"])


def test_what_clients_probe(fake_server: ServerProcess) -> None:
    url = fake_server.url
    assert httpx.head(url + "/").status_code == 200
    assert httpx.head(url + "/api/version").status_code == 200
    assert httpx.head(url + "/api/tags").status_code == 200
    r = httpx.get(url + "/api/")
    assert r.status_code == 404 and set(r.json()) == {"error"}
    r = httpx.get(url + "/api/chat")
    assert r.status_code == 405 and r.headers["allow"] == "POST" and set(r.json()) == {"error"}
    r = httpx.get(url + "/api/tags", headers={"host": "rebound.example"})  # DNS rebinding
    assert r.status_code == 421 and set(r.json()) == {"error"}
    with pytest.raises(ollama.ResponseError) as info:
        client(fake_server).pull("smollm2")
    assert info.value.status_code == 501 and "not supported" in info.value.error


# ---- errors --------------------------------------------------------------------------------


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                     "properties": {}}}}


@pytest.mark.parametrize(("method", "kwargs", "status", "words"), [
    ("chat", {"model": "gpt-4o"}, 404, "model 'gpt-4o' not found"),
    ("generate", {"model": "nope:7b", "prompt": "x"}, 404, "model 'nope:7b' not found"),
    ("chat", {"options": {"temperature": 9}}, 400, "options.temperature"),
    ("chat", {"options": {"bogus": 1}}, 400, "unknown option 'bogus'"),
    # the fake engine cannot generate under a grammar: it refuses rather than ignore them
    ("chat", {"format": "json"}, 400, "cannot constrain its output to a format"),
    ("generate", {"format": {"type": "object"}}, 400, "cannot constrain its output"),
    ("chat", {"tools": [TOOL]}, 400, "cannot constrain its output to tool calls"),
    ("generate", {"suffix": "y"}, 400, "suffix"),
    ("generate", {"template": "{{ .Prompt }}"}, 400, "template"),
    ("generate", {"context": [1, 2]}, 400, "context"),
    ("generate", {"images": [b"\x89PNG"]}, 400, "images"),
    ("generate", {"raw": True, "system": "s"}, 400, "raw mode"),
    ("chat", {"messages": [{"role": "user", "content": "4", "tool_calls": [
        {"function": {"name": "f", "arguments": {}}}]}]}, 400, "only assistant messages"),
    ("chat", {"options": {"num_predict": 10**6}}, 400, "num_predict"),
    ("chat", {"messages": [{"role": "user", "content": "x" * 40000}]}, 400, "context"),
])
def test_refusals_are_response_errors(fake_server: ServerProcess, method: str,
                                      kwargs: dict[str, Any], status: int, words: str) -> None:
    defaults: dict[str, Any] = {"model": "fake"}
    defaults.update({"messages": USER} if method == "chat" else {"prompt": "x"})
    call = getattr(client(fake_server), method)
    for stream in (False, True):  # streamed too: a status before any line
        with pytest.raises(ollama.ResponseError) as info:
            answer = call(**{**defaults, **kwargs}, stream=stream)
            if stream:
                list(answer)
        assert info.value.status_code == status, info.value
        assert words in info.value.error


def test_malformed_bodies_are_400_in_ollamas_shape(fake_server: ServerProcess) -> None:
    url = fake_server.url + "/api/chat"
    for content in (b"", b"{nope", b"[1]", b'{"model": "fake", "options": {"seed": NaN}}',
                    b'{"model": "fake", "messages": "hi"}', b"\xff\xfe"):
        r = httpx.post(url, content=content)
        assert r.status_code == 400, content
        assert set(r.json()) == {"error"} and r.json()["error"]
    huge = json.dumps({"model": "fake", "prompt": "x" * (2 << 20)})
    r = httpx.post(fake_server.url + "/api/generate", content=huge)
    assert r.status_code == 413 and set(r.json()) == {"error"}
    assert client(fake_server).chat(model="fake", messages=USER).message.content == SCRIPT


def test_failure_mid_stream_is_a_last_error_line(fake_server: ServerProcess) -> None:
    messages: Any = [{"role": "user", "content": "[[fail_after=3]][[pace_ms=5]]"}]
    r = httpx.post(fake_server.url + "/api/chat", json={"model": "fake", "messages": messages})
    lines = ndjson(r)
    assert r.status_code == 200
    assert lines[-1] == {"error": "fake engine fault after 3 tokens"}
    assert all(not line.get("done") and "error" not in line for line in lines[:-1])
    seen = []
    with pytest.raises(ollama.ResponseError, match="fault after 3"):
        for part in client(fake_server).chat(model="fake", messages=messages, stream=True):
            seen.append(part.message.content)
    assert "".join(seen) == SCRIPT[:len("".join(seen))] and seen
    with pytest.raises(ollama.ResponseError) as info:  # before the first token: a status
        list(client(fake_server).generate(model="fake", prompt="[[fail_after=0]]",
                                          stream=True))
    assert info.value.status_code == 500


def test_disconnect_cancels_the_generation(fake_server: ServerProcess) -> None:
    before = metric(fake_server, "tokenpipe_cancellations_total")
    stream = client(fake_server).chat(model="fake", stream=True, messages=[
        {"role": "user", "content": "[[pace_ms=20]][[tokens=100000]]"}],
        options={"num_predict": 4000})
    for _ in range(2):
        next(stream)
    stream.close()  # closes the response: the client leaves
    deadline = time.monotonic() + 10
    while metric(fake_server, "tokenpipe_cancellations_total") < before + 1:
        assert time.monotonic() < deadline, "the generation was not cancelled"
        time.sleep(0.05)
    assert metric(fake_server, "tokenpipe_generations_active") == 0


# ---- own servers: the API key, the queue ---------------------------------------------------


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--api-key", "s3cret"))) as server:
        yield server


def test_api_key_guards_api(keyed_server: ServerProcess) -> None:
    for key in ("wrong", None):
        headers = {"authorization": f"Bearer {key}"} if key else {}
        with pytest.raises(ollama.ResponseError) as info:
            client(keyed_server, headers=headers).list()
        assert info.value.status_code == 401 and "API key" in info.value.error
        r = httpx.post(keyed_server.url + "/api/chat", content=b"{bad", headers=headers)
        assert r.status_code == 401 and set(r.json()) == {"error"}  # before the body
    good = client(keyed_server, headers={"authorization": "Bearer s3cret"})
    assert good.chat(model="fake", messages=USER).message.content == SCRIPT


@pytest.fixture(scope="module")
def one_slot_server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--parallel", "1", "--max-queue", "1"))
                 ) as server:
        yield server


async def test_full_queue_is_503_and_a_leaving_client_frees_the_slot(
        one_slot_server: ServerProcess) -> None:
    server = one_slot_server
    url = server.url + "/api/chat"
    slow = {"model": "fake", "messages": [{"role": "user", "content":
                                          "[[pace_ms=20]][[tokens=100000]]"}],
            "options": {"num_predict": 4000}}
    later = {"model": "fake", "messages": [{"role": "user", "content": "[[echo]] after A"}]}
    async with httpx.AsyncClient(timeout=30) as http:
        async with http.stream("POST", url, json=slow) as a:  # A takes the one slot
            a_lines = a.aiter_lines()
            await anext(a_lines)
            b_task = asyncio.create_task(http.post(url, json=later))  # B waits in the queue
            deadline = time.monotonic() + 10
            while await asyncio.to_thread(metric, server, "tokenpipe_generations_queued") < 1:
                assert time.monotonic() < deadline, "B was never queued"
                await asyncio.sleep(0.05)
            c = await http.post(url, json=later)  # the queue (max 1) is full
            assert c.status_code == 503 and c.headers["retry-after"]
            assert set(c.json()) == {"error"}
            async with ollama.AsyncClient(host=server.url) as oc:
                with pytest.raises(ollama.ResponseError) as info:
                    await oc.chat(model="fake", messages=USER)
            assert info.value.status_code == 503
        # A's client left: its generation stops, so B runs now rather than after 80 s
        b = await asyncio.wait_for(b_task, 20)
    lines = ndjson(b)
    assert "".join(line["message"]["content"] for line in lines) == "after A"
    assert lines[-1]["done"] is True


def test_several_models_are_named_the_ollama_way(live_server: Any) -> None:
    url = live_server("--engine", "fake", "--model", "smollm2-135m=fake:",
                      "--model", "smollm2-360m=fake:")
    c = ollama.Client(host=url)
    _OPEN.append(c)
    assert sorted(m.model or "" for m in c.list().models) == ["smollm2-135m:latest",
                                                              "smollm2-360m:latest"]
    answer = c.generate(model="smollm2:360m", prompt="[[echo]] which")
    assert answer.response == "which" and answer.model == "smollm2:360m"
    stream = c.generate(model="smollm2:360m", prompt="[[pace_ms=50]][[tokens=100]]",
                        stream=True)
    next(stream)  # running now: on the model the name means
    active = httpx.get(url + "/metrics").text
    assert 'tokenpipe_generations_active{model="smollm2-360m"} 1.0' in active
    assert 'tokenpipe_generations_active{model="smollm2-135m"} 0.0' in active
    stream.close()
    assert c.show("SmolLM2-135M").parameters == "num_ctx 8192"
    with pytest.raises(ollama.ResponseError) as info:  # both fit
        c.chat(model="smollm2", messages=USER)
    assert info.value.status_code == 404
    assert "smollm2-135m, smollm2-360m" in info.value.error


def test_a_model_that_failed_to_load_is_503() -> None:
    server = ServerProcess(("--model", broken_model()))  # the load fails
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/health").json().get("status") == "error":
                    break
            time.sleep(0.1)
        c = client(server)
        for call in (lambda: c.chat(model="smollm2", messages=USER), lambda: c.list(),
                     lambda: c.generate(model="smollm2"), lambda: c.show("smollm2")):
            with pytest.raises(ollama.ResponseError) as info:
                call()
            assert info.value.status_code == 503 and "broken-model.gguf" in info.value.error
        assert c.ps().models == []
    finally:
        server.stop()


# ---- the real model ------------------------------------------------------------------------


@pytest.mark.model
def test_real_greedy_chat_is_the_openai_doors_text(model_server: ServerProcess) -> None:
    c = client(model_server)
    served = c.list().models[0]
    assert served.details is not None and served.details.format == "gguf"
    messages: Any = [{"role": "user", "content": "Name three colours."}]
    greedy = {"temperature": 0, "num_predict": 24}
    whole = c.chat(model="smollm2", messages=messages, options=greedy)  # an Ollama-style name
    streamed = list(c.chat(model="smollm2:latest", messages=messages, options=greedy,
                           stream=True))
    assert whole.message.content
    assert "".join(p.message.content or "" for p in streamed) == whole.message.content
    assert streamed[-1].eval_count == whole.eval_count
    assert streamed[-1].done_reason == whole.done_reason
    oa = closed_after_test(openai.OpenAI(base_url=model_server.url + "/v1", api_key="unused",
                                         max_retries=0))
    reference = oa.chat.completions.create(
        model=oa.models.list().data[0].id, messages=messages, temperature=0, max_tokens=24)
    assert whole.message.content == reference.choices[0].message.content
    assert reference.usage is not None
    assert whole.eval_count == reference.usage.completion_tokens
    assert whole.prompt_eval_count == reference.usage.prompt_tokens


@pytest.mark.model
def test_real_raw_generate_and_seeded_answers(model_server: ServerProcess) -> None:
    c = client(model_server)
    model = c.list().models[0].model
    assert model is not None
    raw = c.generate(model=model, prompt="The capital of France is", raw=True,
                     options={"temperature": 0, "num_predict": 12})
    oa = closed_after_test(openai.OpenAI(base_url=model_server.url + "/v1", api_key="unused",
                                         max_retries=0))
    reference = oa.completions.create(model=oa.models.list().data[0].id, max_tokens=12,
                                      prompt="The capital of France is", temperature=0)
    assert raw.response == reference.choices[0].text
    seeded = {"temperature": 0.9, "seed": 7, "num_predict": 16}
    first = c.generate(model=model, prompt="Write a line about the sea.", options=seeded)
    again = c.generate(model=model, prompt="Write a line about the sea.", options=seeded,
                       stream=True)
    parts = list(again)
    assert first.response and first.response == "".join(p.response or "" for p in parts)
    assert (first.eval_count or 0) <= 16 and parts[-1].eval_count == first.eval_count
    counted = c.chat(model=model, options={"temperature": 0, "num_predict": 6}, messages=[
        {"role": "user", "content": "Count from one to fifty in words."}])
    assert counted.done_reason == "length" and counted.eval_count == 6
