"""Real vLLM (its CPU build, on the bundled model) as tokenpipe's upstream, and vLLM's own
router in between: the official client through tokenpipe, an answer that goes on on vLLM
when its upstream dies mid-way, and tokenpipe -> vllm-router (cache_aware) -> two vLLM.

The two vLLM servers are the session's (tests/conftest.py `vllm_servers`, started together
once); tests/e2e/test_upstream_contract.py runs the engine contract on the first. Each
test's own servers are tokenpipe processes and the router, which start in seconds.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test, running
from tests.e2e.test_upstream_failover import MOVED, Pauses, active
from tests.e2e.vllm_server import CONTEXT, MODEL_NAME, VllmRouter, VllmServer
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

STORY = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]


@contextlib.contextmanager
def front_over(*upstreams: Any) -> Iterator[ServerProcess]:
    urls = ",".join(u.url for u in upstreams)
    with running(ServerProcess(("--engine", "openai", "--upstream", urls))) as front:
        yield front


def openai_client(server: Any) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="x",
                                           max_retries=0, timeout=120))


def streamed(stream: Any) -> tuple[str, str | None, Any]:
    """The text, finish_reason and usage of a streamed chat or completions answer."""
    texts: list[str] = []
    reason, usage = None, None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            piece = choice.delta.content if hasattr(choice, "delta") else choice.text
            texts.append(piece or "")
            reason = choice.finish_reason or reason
    return "".join(texts), reason, usage


def test_the_official_client_streams_from_vllm_through_tokenpipe(
        vllm_servers: tuple[VllmServer, VllmServer]) -> None:
    """Greedy chat and completions streamed through `--engine openai --upstream <vLLM>`
    equal vLLM's own answers, usage included; the context is vLLM's max_model_len."""
    vllm = vllm_servers[0]
    with front_over(vllm) as front:
        via, direct = openai_client(front), openai_client(vllm)
        card = httpx.get(front.url + "/v1/models", timeout=10).json()["data"][0]
        assert card["id"] == MODEL_NAME and card["max_model_len"] == CONTEXT
        chat = {"model": MODEL_NAME, "messages": STORY, "max_tokens": 48, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        got = streamed(via.chat.completions.create(**chat))
        want = streamed(direct.chat.completions.create(**chat))
        assert got[0] == want[0] and len(got[0]) > 100
        assert got[1] == want[1] == "length"
        assert (got[2].prompt_tokens, got[2].completion_tokens) == (
            want[2].prompt_tokens, want[2].completion_tokens)
        raw = {"model": MODEL_NAME, "prompt": "The capital of France is", "max_tokens": 16,
               "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        got = streamed(via.completions.create(**raw))
        want = streamed(direct.completions.create(**raw))
        assert got[0] == want[0] and got[0].strip()
        assert got[1] == want[1]
        assert got[2].completion_tokens == want[2].completion_tokens


async def test_a_killed_upstream_s_greedy_answer_goes_on_on_vllm(
        vllm_servers: tuple[VllmServer, VllmServer]) -> None:
    """A front over [A, vLLM #2], where A is a tokenpipe over vLLM #1: A is SIGKILLed
    mid-answer, and the answer goes on on vLLM #2 from its token ids (vLLM's
    `return_token_ids`, passed on by A's door): a raw `/v1/completions` prompt of the
    prompt's ids and the answer's, so nothing is tokenized again and max_tokens left is
    exact, however many tokens vLLM put in each chunk. Greedy: the client's text, its
    finish_reason and completion_tokens are vLLM's uninterrupted answer's."""
    first, second = vllm_servers
    # 400 tokens: with 200, a loaded suite once read the first delta after A had ended
    params = {"max_tokens": 400, "temperature": 0}
    reference = openai_client(second)
    whole = reference.chat.completions.create(model=MODEL_NAME, messages=STORY, **params)
    with running(ServerProcess(("--engine", "openai", "--upstream", first.url))) as a, \
            front_over(a, second) as front:
        pauses = Pauses()
        async with Client(front.ws_url) as client:
            gen = await client.generate(STORY, params=params)  # the first pick: A
            async for _ in gen:
                pauses.delta()
                break  # at the first delta: vLLM's chunks may carry many tokens each, and
                # on a loaded machine 120 tokens were over before a second delta was read
            assert active(a) == 1, "the answer did not start on A"
            pauses.kill(a)
            async for _ in gen:
                pauses.delta()
        moved = MOVED.search(front.log())
        assert moved is not None, front.log()
    assert gen.end is not None, gen.error
    print(f"vLLM: moved after {moved[1]} tokens ({moved[2]} characters) from its "
          f"{moved[3]}; equal to the uninterrupted answer: "
          f"{gen.text == whole.choices[0].message.content}; the longest pause after the "
          f"kill {pauses.longest():.3f} s")
    assert moved[3] == "token ids"
    assert gen.text == whole.choices[0].message.content
    assert gen.end["finish_reason"] == whole.choices[0].finish_reason == "length"
    assert gen.end["usage"]["completion_tokens"] == whole.usage.completion_tokens == 400
    assert gen.end["usage"]["prompt_tokens"] == whole.usage.prompt_tokens


def test_return_token_ids_on_tokenpipe_as_on_vllm(
        vllm_servers: tuple[VllmServer, VllmServer]) -> None:
    """`return_token_ids` through tokenpipe gives vLLM's ids in vLLM's fields (chat: the
    chunk's prompt_token_ids, each choice's token_ids; completions: the choice's), and a
    prompt of those ids on tokenpipe's /v1/completions continues as vLLM does."""
    vllm = vllm_servers[0]
    with front_over(vllm) as front:
        def chat(server: Any) -> tuple[list[int], list[int], str]:
            prompt: list[int] = []
            ids: list[int] = []
            texts: list[str] = []
            with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=120, json={
                    "model": MODEL_NAME, "messages": STORY, "max_tokens": 24,
                    "temperature": 0, "stream": True, "return_token_ids": True}) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    prompt = prompt or chunk.get("prompt_token_ids") or []
                    for choice in chunk["choices"]:
                        ids += choice.get("token_ids") or []
                        texts.append(choice["delta"].get("content") or "")
            return prompt, ids, "".join(texts)

        got, want = chat(front), chat(vllm)
        assert got[0] == want[0] and len(got[0]) > 10
        assert got[1][:24] == want[1][:24] and got[2] == want[2]
        going_on = {"model": MODEL_NAME, "prompt": want[0] + want[1][:10], "max_tokens": 14,
                    "temperature": 0, "return_token_ids": True}
        via = httpx.post(front.url + "/v1/completions", json=going_on, timeout=120).json()
        direct = httpx.post(vllm.url + "/v1/completions", json=going_on, timeout=120).json()
        assert via["choices"][0]["text"] == direct["choices"][0]["text"]
        assert via["choices"][0]["token_ids"] == direct["choices"][0]["token_ids"]
        assert via["choices"][0]["prompt_token_ids"] == going_on["prompt"]


def cached_share(usages: list[Any]) -> float:
    prompt = sum(u.prompt_tokens for u in usages)
    cached = sum((u.prompt_tokens_details.cached_tokens or 0) if u.prompt_tokens_details
                 else 0 for u in usages)
    return cached / prompt


def served(vllm: VllmServer) -> int:
    """Requests vLLM finished (its Prometheus counter, summed over finish reasons)."""
    text = httpx.get(vllm.url + "/metrics", timeout=10).text
    return int(sum(float(v) for v in re.findall(
        r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.MULTILINE)))


def test_tokenpipe_streams_through_vllm_router_to_two_vllm(
        vllm_servers: tuple[VllmServer, VllmServer]) -> None:
    """tokenpipe -> vllm-router --policy cache_aware -> two vLLM: four conversations of
    three turns at once stream through the official client, and the router keeps each
    conversation on the vLLM that holds its prefix: every later turn finds cached tokens
    (under round robin about half do: scripts/bench_vllm_router.py)."""
    before = [served(v) for v in vllm_servers]
    with running(VllmRouter([v.url for v in vllm_servers], "cache_aware")) as router, \
            front_over(router) as front:
        client = openai_client(front)

        def chat(topic: str) -> list[Any]:
            # a first message of about 200 tokens: vLLM's CPU cache keeps blocks of 128
            messages = [{"role": "user", "content": f"Tell me about {topic}. " + " ".join(
                f"Question {i}: what else should I know about {topic}?" for i in range(14))}]
            usages = []
            for _ in range(3):
                text, reason, usage = streamed(client.chat.completions.create(
                    model=MODEL_NAME, messages=messages, max_tokens=24, temperature=0,
                    stream=True, stream_options={"include_usage": True}))
                assert text and reason == "length" and usage.completion_tokens == 24
                usages.append(usage)
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": f"And more about {topic}?"}]
            return usages

        with ThreadPoolExecutor(4) as pool:
            chats = list(pool.map(chat, ("lighthouses", "bees", "volcanoes", "comets")))
    took = [served(v) - b for v, b in zip(vllm_servers, before, strict=True)]
    later = [u for usages in chats for u in usages[1:]]
    print(f"vllm-router cache_aware: later turns' cached-token share "
          f"{cached_share(later):.2f}; requests per vLLM {took}")
    assert sum(took) == 12, took
    assert all(u.prompt_tokens_details.cached_tokens > 0 for u in later), later
