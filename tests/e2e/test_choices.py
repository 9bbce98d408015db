"""Several choices (`n`) through the official `openai` SDK on the real bundled model: each
choice its own index and finish_reason, streamed equal whole, usage with the prompt once,
choice i reproducible (the answer n=1 gets with seed + i), the prompt decoded once (the
engine's shared-prefix counter), and n over --max-n refused naming it."""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from typing import Any

import httpx
import openai

from tests.conftest import ServerProcess, closed_after_test

MODEL = "SmolLM2-135M-Instruct"


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0))


def shared_tokens(server: ServerProcess) -> float:
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith("tokenpipe_prompt_tokens_shared_total{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no tokenpipe_prompt_tokens_shared_total")


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}],
            "max_tokens": 16, **extra}


def test_n_choices_whole_and_streamed_are_the_same_reproducible_answers(
        model_server: ServerProcess) -> None:
    client = sdk(model_server)
    request = ask("Write a short line about the sea.", n=3, seed=11, temperature=1.0,
                  logprobs=True)
    whole = client.chat.completions.create(**request)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    texts = [c.message.content for c in whole.choices]
    assert len(set(texts)) > 1  # sampled with three seeds: not one answer thrice
    assert all(c.finish_reason in ("stop", "length") for c in whole.choices)
    assert all(c.logprobs is not None and c.logprobs.content for c in whole.choices)
    # choice i is what n=1 answers with seed 11 + i
    for i, text in enumerate(texts):
        alone = client.chat.completions.create(**{**request, "n": 1, "seed": 11 + i})
        assert alone.choices[0].message.content == text
        if i == 0:
            assert whole.usage is not None and alone.usage is not None
            assert whole.usage.prompt_tokens == alone.usage.prompt_tokens  # once

    parts: dict[int, str] = defaultdict(str)
    finishes: dict[int, str] = {}
    usage = None
    for chunk in client.chat.completions.create(**request, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            assert len(chunk.choices) == 1
            parts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                assert choice.index not in finishes  # one finish per choice
                finishes[choice.index] = choice.finish_reason
    assert [parts[i] for i in range(3)] == texts
    assert finishes == {i: c.finish_reason for i, c in enumerate(whole.choices)}
    assert usage is not None and whole.usage is not None
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert usage.completion_tokens == whole.usage.completion_tokens == sum(
        len(c.logprobs.content or []) for c in whole.choices if c.logprobs)


def test_the_prompt_is_decoded_once_for_all_choices(model_server: ServerProcess) -> None:
    """A prompt no slot holds: the other three choices copy the first one's cells (all but
    the last prompt token, which each decodes for its own logits)."""
    client = sdk(model_server)
    before = shared_tokens(model_server)
    answer = client.chat.completions.create(**ask(
        f"Tag {secrets.token_hex(6)}: name a fruit.", n=4, temperature=0, max_tokens=4))
    shared = shared_tokens(model_server) - before
    assert answer.usage is not None
    prompt = answer.usage.prompt_tokens
    assert shared >= 3 * (prompt - 1), (shared, prompt)
    # greedy: four times the same answer, as OpenAI gives
    assert len({c.message.content for c in answer.choices}) == 1
    # a short prompt (under the 32 tokens two different prompts must share) is shared too
    before = shared_tokens(model_server)
    text = httpx.post(model_server.url + "/v1/completions", timeout=120, json={
        "prompt": f"Tag {secrets.token_hex(6)}: a fruit is", "n": 2, "max_tokens": 5,
        "temperature": 0}).json()
    assert text["usage"]["prompt_tokens"] < 32
    assert shared_tokens(model_server) - before == text["usage"]["prompt_tokens"] - 1
    assert [c["index"] for c in text["choices"]] == [0, 1]
    assert text["choices"][0]["text"] == text["choices"][1]["text"]
    assert text["usage"]["completion_tokens"] == 10


def test_completion_choices_streamed_carry_their_index(model_server: ServerProcess) -> None:
    body = {"prompt": "The sky is", "n": 2, "max_tokens": 6, "temperature": 0.9, "seed": 3}
    whole = httpx.post(model_server.url + "/v1/completions", json=body, timeout=120).json()
    got: dict[int, str] = defaultdict(str)
    ends: dict[int, str] = {}
    for chunk in sdk(model_server).completions.create(**body, model=MODEL, stream=True):
        for choice in chunk.choices:
            got[choice.index] += choice.text
            if choice.finish_reason:
                ends[choice.index] = choice.finish_reason
    assert [got[0], got[1]] == [c["text"] for c in whole["choices"]]
    assert ends == {0: "length", 1: "length"}


def test_n_above_the_limit_is_refused_naming_n(fake_server: ServerProcess) -> None:
    r = httpx.post(fake_server.url + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "n": 9})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "n"
    assert "--max-n" in r.json()["error"]["message"]


def cancellations(server: ServerProcess) -> float:
    return sum(float(line.rsplit(" ", 1)[1])  # over every `api`
               for line in httpx.get(server.url + "/metrics").text.splitlines()
               if line.startswith("tokenpipe_cancellations_total"))


def test_a_client_that_leaves_cancels_every_choice(fake_server: ServerProcess) -> None:
    before = cancellations(fake_server)
    body = {"messages": [{"role": "user", "content": "[[pace_ms=20]] [[tokens=500]]"}],
            "n": 3, "stream": True}
    seen: set[int] = set()
    with httpx.stream("POST", fake_server.url + "/v1/chat/completions", json=body,
                      timeout=30) as r:
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                seen.add(int(line.split('"index":', 1)[1].split(",", 1)[0]))
            if len(seen) == 3:
                break  # every choice is streaming: leave
    deadline = time.monotonic() + 10
    while cancellations(fake_server) - before < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cancellations(fake_server) - before == 3


def test_a_failing_choice_ends_the_answer_with_its_error(fake_server: ServerProcess) -> None:
    body = {"messages": [{"role": "user", "content": "[[fail_after=3]]"}], "n": 2,
            "max_tokens": 20}
    whole = httpx.post(fake_server.url + "/v1/chat/completions", json=body, timeout=30)
    assert whole.status_code == 500 and whole.json()["error"]["message"]
    streamed = httpx.post(fake_server.url + "/v1/chat/completions", timeout=30,
                          json={**body, "stream": True})
    events = [line for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert '"error"' in events[-2] and events[-1] == "data: [DONE]"
