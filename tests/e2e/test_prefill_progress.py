"""Prefill progress before the first token, and metrics by API (#18 items 5, 6): a prompt
of more than one chunk reports its tokens processed, on tokenpipe.v1 as `progress` frames
and on the HTTP doors as `: prefill N/M` SSE comments that the SDKs skip; a short prompt
sends nothing new; every request metric names the door (`api`). The real bundled model
(llama.cpp) for what the engine reports and counts; the fake engine's `[[prefill_ms=N]]`
for what the doors make of it (the SDKs, Anthropic, Responses, n choices, resumable SSE,
Ollama's NDJSON lines with a `prefill` field, which its clients ignore)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
import websockets

from tests.conftest import ServerProcess, closed_after_test
from tokenpipe.engines.fake import SCRIPT, fake_token_bytes, fake_tokenize
from tokenpipe.server.doors import DOORS, api_labels

pytestmark = [pytest.mark.e2e]

PROMPT_CHUNK = 512  # the llama.cpp engine's prompt tokens per step
PREFILL = re.compile(r"^: prefill (\d+)/(\d+)$")


def long_prompt(lines: int = 60) -> str:
    """About 13.5 tokens a line on the bundled model; a fresh tag keeps it out of the cache
    (a cached prefix is taken, not computed, and a short rest sends no progress)."""
    body = " ".join(f"Line {i}: the river runs past the old mill." for i in range(lines))
    return f"[{uuid.uuid4().hex}] {body} Summarize."


def increasing_to_the_end(progress: list[tuple[int, int]], usage: dict[str, Any]) -> None:
    """One report per chunk computed, counting the tokens taken from the cache (a shared
    start: the template's system turn), up to the whole prompt."""
    total, cached = usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
    assert total - cached > PROMPT_CHUNK, usage  # more than one chunk to compute
    assert progress == [(min(done, total), total)
                        for done in range(cached + PROMPT_CHUNK, total + PROMPT_CHUNK,
                                          PROMPT_CHUNK)]


async def v1_frames(server: ServerProcess, content: str) -> list[dict[str, Any]]:
    async with websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"]) as ws:
        assert json.loads(await ws.recv())["type"] == "hello"
        await ws.send(json.dumps({"type": "generate", "id": "g", "messages": [
            {"role": "user", "content": content}], "params": {"max_tokens": 3}}))
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] not in ("end", "error"):
            frames.append(json.loads(await ws.recv()))
        return frames


def sse_lines(server: ServerProcess, path: str, body: dict[str, Any],
              headers: dict[str, str] | None = None) -> list[str]:
    with httpx.stream("POST", server.url + path, json=body, headers=headers,
                      timeout=300) as r:
        assert r.status_code == 200, r.read()
        return [line for line in r.iter_lines() if line]


def prefills(lines: list[str]) -> tuple[list[tuple[int, int]], int]:
    """The prefill comments, and the index of the first line that is not a comment."""
    first = next(i for i, line in enumerate(lines) if not line.startswith(":"))
    found = [(int(m[1]), int(m[2])) for line in lines if (m := PREFILL.match(line))]
    assert all(not PREFILL.match(line) for line in lines[first:]), lines[:first + 3]
    return found, first


# ---- the real engine ----------------------------------------------------------------------


@pytest.mark.model
async def test_v1_progress_frames_rise_to_the_prompt_before_the_first_delta(
        model_server: ServerProcess) -> None:
    frames = await v1_frames(model_server, long_prompt())
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "start" and kinds[-1] == "end", kinds
    usage = frames[-1]["usage"]
    assert frames[0]["prompt_tokens"] == usage["prompt_tokens"]
    progress = [f for f in frames if f["type"] == "progress"]
    assert all(set(f) == {"type", "id", "prompt_tokens_done", "prompt_tokens"} and f["id"] == "g"
               for f in progress), progress
    increasing_to_the_end([(f["prompt_tokens_done"], f["prompt_tokens"]) for f in progress],
                          usage)
    assert kinds.index("delta") > max(i for i, k in enumerate(kinds) if k == "progress")

    short = [f["type"] for f in await v1_frames(model_server, "Say hi.")]
    assert "progress" not in short and short[0] == "start", short  # one chunk: none


@pytest.mark.model
def test_openai_sse_gets_prefill_comments_before_the_first_chunk(
        model_server: ServerProcess) -> None:
    body = {"messages": [{"role": "user", "content": long_prompt()}], "max_tokens": 3,
            "stream": True, "stream_options": {"include_usage": True}}
    lines = sse_lines(model_server, "/v1/chat/completions", body)
    progress, first = prefills(lines)
    assert lines[-1] == "data: [DONE]"
    usage = json.loads(lines[-2].removeprefix("data: "))["usage"]
    increasing_to_the_end(progress, usage)
    assert json.loads(lines[first].removeprefix("data: "))["object"] == "chat.completion.chunk"

    short = sse_lines(model_server, "/v1/chat/completions", {**body, "messages": [
        {"role": "user", "content": "Say hi."}]})
    assert not [line for line in short if PREFILL.match(line)], short


REQUEST_METRICS = ("tokenpipe_tokens_generated_total", "tokenpipe_prompt_tokens_total",
                   "tokenpipe_generations_finished_total", "tokenpipe_cancellations_total",
                   "tokenpipe_errors_total", "tokenpipe_time_to_first_token_seconds",
                   "tokenpipe_inter_token_latency_seconds")
SAMPLE = re.compile(r"^(tokenpipe_[a-z_]+?)(_bucket|_count|_sum|_created)?\{([^}]*)\} (\S+)$")


def request_samples(server: ServerProcess) -> dict[tuple[str, str, str], float]:
    """Each request metric's samples by (name, api, its other labels), checking that every
    one of them carries an `api` of the fixed set."""
    out: dict[tuple[str, str, str], float] = {}
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        m = SAMPLE.match(line)
        if m is None or m[1] not in REQUEST_METRICS or m[2] == "_created":
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[3]))
        api = labels.pop("api", None)
        assert api in api_labels(DOORS), line
        out[(m[1] + (m[2] or ""), api, str(sorted(labels.items())))] = float(m[4])
    return out


def count(samples: dict[tuple[str, str, str], float], name: str, api: str) -> float:
    return sum(v for (n, a, _), v in samples.items() if n == name and a == api)


@pytest.mark.model
async def test_request_metrics_are_labelled_by_the_door(model_server: ServerProcess) -> None:
    before = request_samples(model_server)
    frames = await v1_frames(model_server, "Say hi.")
    assert frames[-1]["type"] == "end"
    sdk = closed_after_test(openai.OpenAI(base_url=model_server.url + "/v1", api_key="unused",
                                          max_retries=0))
    sdk.chat.completions.create(model="SmolLM2-135M-Instruct", max_tokens=3,
                                messages=[{"role": "user", "content": "Say hi."}])
    after = request_samples(model_server)
    for api in ("ws", "openai_chat"):
        for name in ("tokenpipe_generations_finished_total",
                     "tokenpipe_time_to_first_token_seconds_count"):
            assert count(after, name, api) == count(before, name, api) + 1, (name, api)
        for name in ("tokenpipe_tokens_generated_total", "tokenpipe_prompt_tokens_total"):
            assert count(after, name, api) > count(before, name, api), (name, api)


# ---- the doors, on the fake engine's scripted prefill ----------------------------------------

FAKE_LONG = "[[prefill_ms=20]][[tokens=5]] " + "abcdef" * 400  # ~1,200 fake tokens: 3 steps
ANSWER = b"".join(map(fake_token_bytes, fake_tokenize(SCRIPT.encode())[:5])).decode()


def test_sdks_parse_streams_that_carry_prefill_comments(fake_server: ServerProcess) -> None:
    c = closed_after_test(openai.OpenAI(base_url=fake_server.url + "/v1", api_key="unused",
                                        max_retries=0))
    chunks = list(c.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": FAKE_LONG}], stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == ANSWER
    assert chunks[-1].choices[0].finish_reason == "stop"
    completion = "".join(ch.choices[0].text for ch in c.completions.create(
        model="fake", prompt=FAKE_LONG, stream=True))
    assert completion == ANSWER

    a = closed_after_test(anthropic.Anthropic(base_url=fake_server.url, api_key="unused",
                                              max_retries=0))
    with a.messages.stream(model="fake", max_tokens=50,
                           messages=[{"role": "user", "content": FAKE_LONG}]) as stream:
        assert "".join(stream.text_stream) == ANSWER
        assert stream.get_final_message().stop_reason == "end_turn"


@pytest.mark.parametrize(("path", "body", "opening"), [
    ("/v1/completions", {"prompt": FAKE_LONG}, "data: "),
    ("/v1/completions", {"prompt": FAKE_LONG, "n": 2}, "data: "),  # the prompt's, once
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": FAKE_LONG}],
                              "resumable": True}, "id: 0"),
    ("/v1/messages", {"max_tokens": 50, "messages": [{"role": "user", "content": FAKE_LONG}]},
     "event: message_start"),
    ("/v1/responses", {"input": FAKE_LONG}, "event: response.created"),
])
def test_each_sse_door_says_the_prefill_before_its_first_event(
        fake_server: ServerProcess, path: str, body: dict[str, Any], opening: str) -> None:
    lines = sse_lines(fake_server, path, {"model": "fake", "stream": True, **body},
                      headers={"anthropic-version": "2023-06-01"})
    progress, first = prefills(lines)
    assert lines[first].startswith(opening), lines[first]
    total = progress[-1][1]
    assert progress == [(min(d, total), total) for d in range(512, total + 512, 512)]
    assert total > 2 * 512


def test_ollama_ndjson_says_the_prefill_in_lines_its_clients_ignore(
        fake_server: ServerProcess) -> None:
    with httpx.stream("POST", fake_server.url + "/api/generate", timeout=60,
                      json={"model": "fake", "prompt": FAKE_LONG}) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]  # JSON, every line
    assert "".join(line["response"] for line in lines) == ANSWER and lines[-1]["done"]
    said = [line for line in lines if "prefill" in line]
    assert said == lines[:len(said)]  # before the first text
    assert all(line["response"] == "" and line["done"] is False for line in said)
    total = said[-1]["prefill"]["total"]
    assert [(p["prefill"]["done"], p["prefill"]["total"]) for p in said] == [
        (min(d, total), total) for d in range(512, total + 512, 512)]

    with ollama.Client(host=fake_server.url) as client:
        chat = list(client.chat(model="fake", stream=True,
                                messages=[{"role": "user", "content": FAKE_LONG}]))
        generated = list(client.generate(model="fake", prompt=FAKE_LONG, stream=True))
    assert "".join(part.message.content or "" for part in chat) == ANSWER and chat[-1].done
    assert "".join(part.response or "" for part in generated) == ANSWER


@pytest.mark.parametrize(("path", "body", "before_first_delta"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": FAKE_LONG}],
                              "resumable": True}, '"role":"assistant"'),
    ("/v1/responses", {"input": FAKE_LONG, "background": True}, "response.output_text.delta"),
])
def test_resumable_streams_say_the_prefill_too(
        fake_server: ServerProcess, path: str, body: dict[str, Any],
        before_first_delta: str) -> None:
    """The streams the chat page uses (a resumable chat stream, a background response)
    report a long prompt's prefill as a foreground stream does, before the first delta."""
    lines = sse_lines(fake_server, path, {"model": "fake", "stream": True, **body})
    progress = [(int(m[1]), int(m[2])) for line in lines if (m := PREFILL.match(line))]
    total = progress[-1][1] if progress else 0
    assert total > 2 * 512 and progress == [
        (min(d, total), total) for d in range(512, total + 512, 512)], lines[:8]
    last = max(i for i, line in enumerate(lines) if PREFILL.match(line))
    first_delta = next(i for i, line in enumerate(lines) if before_first_delta in line)
    assert last < first_delta, lines[:last + 3]
