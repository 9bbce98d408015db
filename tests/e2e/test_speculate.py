"""`tokenpipe serve --speculate ngram` through every door (issue 33): the same answers as
the session's plain server (model_server: same model, cache and parallelism), with stop
strings, an output format, logprobs, `n` and cancel; drafted and accepted tokens in the
v1 end frame, in OpenAI's usage and on /metrics. `--speculate draft --draft-model` (the
bundled model drafting for itself) through the chat completions door. The engine tests
(tests/unit/engines/test_llamacpp_speculate.py, test_llamacpp_draft.py) check the same
answer over many prompts."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess, running
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

MODEL = "SmolLM2-135M-Instruct"
GROUNDED = ("Repeat this text exactly: The museum opens at nine in the morning and closes "
            "at six in the evening. Tickets cost twelve euros for adults.")
TOKENS = 24


def drafting(*source: str) -> Iterator[ServerProcess]:
    """As model_server, plus drafts from `source` at every step (the adaptive policy
    follows timings)."""
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    with running(ServerProcess(("--parallel", "4", "--ctx-size", "8192", "--kv-cache",
                                "split", "--speculate", *source, "--speculate-policy",
                                "always", "--speculate-draft", "4"))) as server:
        yield server


@pytest.fixture(scope="module")
def spec_server() -> Iterator[ServerProcess]:
    yield from drafting("ngram")


@pytest.fixture(scope="module")
def draft_server() -> Iterator[ServerProcess]:
    from tokenpipe.engines.base import bundled_model_path

    yield from drafting("draft", "--draft-model", str(bundled_model_path()))


def user(text: str = GROUNDED) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def post(server: ServerProcess, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(server.url + path, json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def door_texts(server: ServerProcess) -> dict[str, Any]:
    """One grounded request through each HTTP door: its answer's text (and what the door
    says of drafts where it has a field for them)."""
    chat = post(server, "/v1/chat/completions", {
        "model": MODEL, "messages": user(), "max_tokens": TOKENS, "temperature": 0,
        "logprobs": True, "top_logprobs": 2, "stop": ["euros"]})
    seeded = post(server, "/v1/chat/completions", {
        "model": MODEL, "messages": user(), "max_tokens": TOKENS, "temperature": 0.9,
        "seed": 11, "n": 2})
    shaped = post(server, "/v1/chat/completions", {
        "model": MODEL, "messages": user(), "max_tokens": TOKENS, "temperature": 0,
        "response_format": {"type": "json_object"}})
    completion = post(server, "/v1/completions", {
        "model": MODEL, "prompt": GROUNDED + "\n" + GROUNDED[26:60], "max_tokens": TOKENS,
        "temperature": 0})
    anthropic = post(server, "/v1/messages", {
        "model": MODEL, "messages": user(), "max_tokens": TOKENS, "temperature": 0})
    ollama = post(server, "/api/chat", {
        "model": MODEL, "messages": user(), "stream": False,
        "options": {"temperature": 0, "num_predict": TOKENS}})
    responses = post(server, "/v1/responses", {
        "model": MODEL, "input": GROUNDED, "max_output_tokens": TOKENS, "temperature": 0})
    return {
        "chat, stop, logprobs": (chat["choices"][0]["message"]["content"],
                                 chat["choices"][0]["logprobs"]),
        "chat, seeded, n=2": [c["message"]["content"] for c in seeded["choices"]],
        "chat, json_object": shaped["choices"][0]["message"]["content"],
        "completions": completion["choices"][0]["text"],
        "anthropic": anthropic["content"][0]["text"],
        "ollama": ollama["message"]["content"],
        "responses": responses["output"][-1]["content"][0]["text"],
        "usage": chat["usage"]["completion_tokens_details"],
    }


def test_every_door_gives_the_plain_servers_answer(
    spec_server: ServerProcess, model_server: ServerProcess,
) -> None:
    plain, spec = door_texts(model_server), door_texts(spec_server)
    assert plain.pop("usage")["accepted_prediction_tokens"] == 0
    drafts = spec.pop("usage")
    assert {k: (v, spec[k]) for k, v in plain.items() if spec[k] != v} == {}
    assert plain["chat, stop, logprobs"][0].endswith("twelve ")  # the stop string cut it
    assert drafts["accepted_prediction_tokens"] > 0  # it did copy from the prompt


def metric(text: str, name: str) -> float:
    found = re.search(re.escape(name) + r'\{api="ws"\} ([0-9.e+-]+)', text)
    return float(found.group(1)) if found else 0.0


async def test_the_end_frame_and_metrics_count_drafts_and_cancel_keeps_the_engine(
    spec_server: ServerProcess, model_server: ServerProcess,
) -> None:
    async with Client(model_server.ws_url) as client:
        plain = await (await client.generate(user(), params={"max_tokens": TOKENS})).collect()
    async with Client(spec_server.ws_url) as client:
        gen = await client.generate(user("Count from one to two hundred in words."),
                                    params={"max_tokens": 400})
        async for _ in gen:
            await gen.cancel()  # mid-answer, drafts in flight
        assert gen.end is not None and gen.end["finish_reason"] == "cancelled"
        before = (await asyncio.to_thread(httpx.get, spec_server.url + "/metrics")).text
        gen = await client.generate(user(), params={"max_tokens": TOKENS})
        text = await gen.collect()
        after = (await asyncio.to_thread(httpx.get, spec_server.url + "/metrics")).text
    assert text == plain
    assert gen.end is not None
    timing, usage = gen.end["timing"], gen.end["usage"]["completion_tokens_details"]
    assert 0 < timing["accepted_tokens"] < timing["drafted_tokens"]
    assert usage["accepted_prediction_tokens"] == timing["accepted_tokens"]
    assert usage["rejected_prediction_tokens"] == (timing["drafted_tokens"]
                                                   - timing["accepted_tokens"])
    for name, key in (("tokenpipe_draft_tokens_total", "drafted_tokens"),
                      ("tokenpipe_draft_tokens_accepted_total", "accepted_tokens")):
        assert metric(after, name) - metric(before, name) == timing[key]


def test_a_draft_model_gives_the_plain_servers_answer(
    draft_server: ServerProcess, model_server: ServerProcess,
) -> None:
    """Through /v1/chat/completions: greedy with a stop string and logprobs, seeded with
    n=2, and under a JSON schema; drafts counted in the usage and on /metrics."""
    schema = {"type": "object", "properties": {"opens": {"type": "string"},
                                               "price": {"type": "integer"}},
              "required": ["opens", "price"]}
    bodies = {
        "greedy, stop, logprobs": {"temperature": 0, "logprobs": True, "top_logprobs": 2,
                                   "stop": ["euros"]},
        "seeded, n=2": {"temperature": 0.9, "seed": 11, "n": 2},
        "json schema": {"temperature": 0, "response_format": {
            "type": "json_schema", "json_schema": {"name": "museum", "schema": schema}}},
        "free text": {"temperature": 0, "messages": user("Why is the sky blue?")},
    }

    def answers(server: ServerProcess) -> tuple[dict[str, Any], int, int]:
        out, drafted, accepted = {}, 0, 0
        for name, extra in bodies.items():
            got = post(server, "/v1/chat/completions", {
                "model": MODEL, "messages": user(), "max_tokens": TOKENS, **extra})
            out[name] = [(c["message"]["content"], c.get("logprobs")) for c in got["choices"]]
            details = got["usage"]["completion_tokens_details"]
            accepted += details["accepted_prediction_tokens"]
            drafted += (details["accepted_prediction_tokens"]
                        + details["rejected_prediction_tokens"])
        return out, drafted, accepted

    def counted(name: str) -> float:  # over every door's label
        text = httpx.get(draft_server.url + "/metrics").text
        return sum(float(v) for v in re.findall(re.escape(name) + r'\{api="[^"]*"\} (\S+)',
                                                text))

    before = [counted(n) for n in ("tokenpipe_draft_tokens_total",
                                   "tokenpipe_draft_tokens_accepted_total")]
    (plain, plain_drafted, _), (spec, drafted, accepted) = (answers(model_server),
                                                            answers(draft_server))
    after = [counted(n) for n in ("tokenpipe_draft_tokens_total",
                                  "tokenpipe_draft_tokens_accepted_total")]
    assert {k: (v, spec[k]) for k, v in plain.items() if spec[k] != v} == {}
    assert plain["greedy, stop, logprobs"][0][0].endswith("twelve ")  # the stop cut it
    assert plain_drafted == 0
    assert 0 < accepted <= drafted
    assert [a - b for a, b in zip(after, before, strict=True)] == [drafted, accepted]
    print(f"\ndraft model: {drafted} drafted, {accepted} accepted")
