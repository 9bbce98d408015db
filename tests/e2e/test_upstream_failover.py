"""An upstream killed mid-answer (SIGKILL) behind the openai engine: the answer goes on on
another upstream, and the client sees one uninterrupted answer, byte for byte.

A tokenpipe front (`--engine openai --upstream A,B`) over two tokenpipe fake-engine
upstreams (their answers depend on the request alone, and they continue an answer begun as
their script), over tokenpipe.v1 and over OpenAI's SSE with the official client; then over
llama.cpp's llama-server on the bundled model, greedy. Each test runs the answer that is
interrupted beside the same request on the upstream left alive, uninterrupted: the
reference. The longest pause a client saw between two deltas after the kill is printed.

tokenpipe upstreams return the answer's token ids (vLLM's `return_token_ids`), so the
answer goes on from them: the count is exact and the fake tests expect the uninterrupted
answer itself. Where an answer goes on from its text (llama-server sends no ids), the
engine counts the chunks that brought text; an upstream that put two tokens in one chunk
before the kill leaves that count short, the continuation's max_tokens that much too
large: the answer of that many more tokens is then expected, and said so.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import ServerProcess, closed_after_test, running
from tests.e2e.llama_server import LlamaServer
from tokenpipe.client import Client, ServerError

pytestmark = pytest.mark.e2e

PACED = [{"role": "user", "content": "[[pace_ms=20]]"}]
MAX_TOKENS = 100  # of the fake's 120: ends by length, past its Japanese and emoji
MOVED = re.compile(r"going on with the answer elsewhere after (\d+) tokens \((\d+) characters"
                   r"\), from its (token ids|text)")


@contextlib.contextmanager
def front_over(upstreams: Sequence[Any]) -> Iterator[ServerProcess]:
    urls = ",".join(u.url for u in upstreams)
    with running(ServerProcess(("--engine", "openai", "--upstream", urls))) as front:
        yield front


@pytest.fixture
def fakes() -> Iterator[tuple[ServerProcess, ServerProcess, ServerProcess]]:
    """Two fake-engine upstreams and the front over both: (front, a, b)."""
    with contextlib.ExitStack() as stack:
        upstreams = [ServerProcess(("--engine", "fake")) for _ in range(2)]
        for upstream in upstreams:
            stack.enter_context(running(upstream))
        front = stack.enter_context(front_over(upstreams))
        yield front, upstreams[0], upstreams[1]


def active(server: ServerProcess) -> int:
    text = httpx.get(server.url + "/metrics", timeout=5).text
    return sum(int(float(v)) for v in re.findall(
        r"^tokenpipe_generations_active(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE))


def serving(upstreams: Sequence[Any], busy: Callable[[Any], int]) -> Any:
    """The one upstream generating (the front sent it the answer)."""
    found = [u for u in upstreams if busy(u)]
    assert len(found) == 1, [busy(u) for u in upstreams]
    return found[0]


class Pauses:
    """When each delta came; the longest pause after the kill (the client's hiccup)."""

    def __init__(self) -> None:
        self.at: list[float] = []
        self.killed: float | None = None

    def delta(self) -> None:
        self.at.append(time.monotonic())

    def kill(self, upstream: Any) -> None:
        upstream.stop(signal.SIGKILL)
        self.killed = time.monotonic()

    def longest(self) -> float:
        assert self.killed is not None
        after = [self.killed] + [t for t in self.at if t > self.killed]
        assert len(after) > 1, "no delta came after the kill"
        return max(b - a for a, b in itertools.pairwise(after))


# ---- two tokenpipe fake-engine upstreams -----------------------------------------------


def expected(front: ServerProcess, reference: str) -> tuple[str, str]:
    """What the client must have read, and a line saying why: the reference itself, the
    answer having gone on from its token ids (exact, whatever the chunks carried)."""
    moved = MOVED.search(front.log())
    assert moved is not None, front.log()
    assert moved[3] == "token ids", "a tokenpipe upstream sends its token ids"
    return reference, (f"moved after {moved[1]} tokens ({moved[2]} characters) from its "
                       "token ids: equal to the uninterrupted answer")


async def test_a_killed_upstream_s_answer_goes_on_over_the_websocket(
        fakes: tuple[ServerProcess, ServerProcess, ServerProcess]) -> None:
    front, a, b = fakes
    params = {"max_tokens": MAX_TOKENS}
    pauses = Pauses()
    async with Client(front.ws_url) as client:
        gen = await client.generate(PACED, params=params)
        async for _ in gen:
            pauses.delta()
            if len(gen.deltas) >= 8:
                break
        victim = serving((a, b), active)
        # the reference: the same request, on the other upstream (the least busy)
        whole = await client.generate(PACED, params=params)
        pauses.kill(victim)
        reference = asyncio.ensure_future(whole.collect())
        async for _ in gen:
            pauses.delta()
        await reference
    assert gen.end is not None and whole.end is not None, (gen.error, whole.error)
    text, why = expected(front, whole.text)
    assert gen.text == text and len(whole.text) > 100
    assert gen.end["finish_reason"] == whole.end["finish_reason"] == "length"
    assert gen.end["usage"]["completion_tokens"] == whole.end["usage"]["completion_tokens"]
    assert gen.end["usage"]["completion_tokens"] == MAX_TOKENS
    assert [d["seq"] for d in gen.deltas] == list(range(len(gen.deltas)))
    print(f"tokenpipe.v1: {why}; the longest pause after the kill {pauses.longest():.3f} s "
          f"(pace 0.020 s)")


def test_a_killed_upstream_s_answer_goes_on_over_openai_sse(
        fakes: tuple[ServerProcess, ServerProcess, ServerProcess]) -> None:
    front, a, b = fakes
    client = closed_after_test(openai.OpenAI(base_url=front.url + "/v1", api_key="x",
                                             max_retries=0))

    def ask() -> Any:
        return client.chat.completions.create(
            model="fake", messages=PACED, max_tokens=MAX_TOKENS, stream=True,
            stream_options={"include_usage": True})

    def read(stream: Any, pauses: Pauses | None = None, until: int | None = None
             ) -> tuple[list[str], str | None, Any]:
        texts: list[str] = []
        reason, usage = None, None
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                if choice.delta.content:
                    texts.append(choice.delta.content)
                    if pauses is not None:
                        pauses.delta()
                reason = choice.finish_reason or reason
            if until is not None and len(texts) >= until:
                break
        return texts, reason, usage

    pauses = Pauses()
    victim_stream = ask()
    begun, _, _ = read(victim_stream, pauses, until=8)
    victim = serving((a, b), active)
    whole_stream = ask()  # the reference, on the other upstream
    pauses.kill(victim)
    rest, reason, usage = read(victim_stream, pauses)
    whole, whole_reason, whole_usage = read(whole_stream)
    text, why = expected(front, "".join(whole))
    assert "".join(begun + rest) == text and len("".join(whole)) > 100
    assert reason == whole_reason == "length"
    assert usage.completion_tokens == whole_usage.completion_tokens == MAX_TOKENS
    print(f"OpenAI SSE: {why}; the longest pause after the kill {pauses.longest():.3f} s "
          f"(pace 0.020 s)")


# ---- two llama-servers on the bundled model --------------------------------------------


def slots_busy(server: LlamaServer) -> int:
    slots = httpx.get(server.url + "/slots", timeout=5).json()
    return sum(1 for s in slots if s.get("is_processing"))


@pytest.mark.model
async def test_a_killed_llama_server_s_greedy_answer_goes_on_on_another() -> None:
    """Greedy on llama.cpp's own server: the continuation (the text so far as the last
    assistant message, re-tokenized by the next llama-server: it returns no token ids) goes
    on from exactly the text the client has, nothing lost or repeated at the seam, to the
    answer's full 200 tokens. Equal to the uninterrupted answer only mostly: re-tokenized
    text and a prefill batch are not the tokens and single steps that made it (one run in
    seven of the whole suite differed 100 characters after the move), so equality is
    printed, not asserted; from token ids (tokenpipe and vLLM upstreams) it is asserted.
    Then with a JSON schema on the last two: engine_error, never a continuation under a
    grammar started again."""
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    ask = [{"role": "user", "content": "Write a long story about a dragon and a knight."}]
    params = {"max_tokens": 200, "temperature": 0}
    with contextlib.ExitStack() as stack:
        upstreams = [LlamaServer(ctx_size=4096, parallel=2) for _ in range(3)]
        for upstream in upstreams:
            stack.enter_context(running(upstream))
        front = stack.enter_context(front_over(upstreams))
        pauses = Pauses()
        async with Client(front.ws_url) as client:
            whole = await (await client.generate(ask, params=params)).collect()
            gen = await client.generate(ask, params=params)
            async for _ in gen:
                pauses.delta()
                if len(gen.deltas) >= 5:
                    break
            victim = serving(upstreams, slots_busy)
            pauses.kill(victim)
            async for _ in gen:
                pauses.delta()
            moved = MOVED.search(front.log())
            assert moved is not None, front.log()
            equal = gen.text == whole
            print(f"llama-server: moved after {moved[1]} chunks ({moved[2]} characters) of "
                  f"{gen.end and gen.end['usage']['completion_tokens']}; equal to the "
                  f"uninterrupted answer: {equal}; the longest pause after the kill "
                  f"{pauses.longest():.3f} s")
            if not equal:
                cut = next(i for i, (x, y) in enumerate(zip(gen.text, whole, strict=False))
                           if x != y)
                print(f"first difference at character {cut}: {gen.text[cut - 40:cut + 40]!r}"
                      f" vs {whole[cut - 40:cut + 40]!r}")
            assert gen.end is not None and gen.end["finish_reason"] == "length"
            assert gen.end["usage"]["completion_tokens"] == 200
            seam = int(moved[2])  # the characters the client had when it moved
            assert gen.text[:seam] == whole[:seam] and len(gen.text) > seam

            left = [u for u in upstreams if u is not victim]
            schema = {"max_tokens": 200, "temperature": 0, "response_format": {
                "type": "json_schema", "json_schema": {"name": "story", "schema": {
                    "type": "object", "properties": {"story": {"type": "string"}},
                    "required": ["story"]}}}}
            bound = await client.generate(ask, params=schema)
            async for _ in bound:  # killed at the first delta: under a loaded suite the
                break  # front had read the whole answer by the fifth (its JSON closed early)
            serving(left, slots_busy).stop(signal.SIGKILL)
            with pytest.raises(ServerError) as caught:
                await bound.collect()
            assert caught.value.code == "engine_error"
            assert "could go on" not in caught.value.frame["message"]
            assert bound.text.startswith("{")
            assert len(MOVED.findall(front.log())) == 1  # not moved
