"""The shared engine contract (tests/test_engine_contract.py) run on the openai engine, with
a real server as its upstream: tokenpipe on the fake engine, tokenpipe on the real model,
llama.cpp's llama-server on the real model, and vLLM's CPU build on the real model (the
session's, tests/conftest.py `vllm_servers`).

Two clauses read differently for an engine without a tokenizer: the prompt's token count
arrives with the finish (EngineStart says None; the contract's run() knows the engine by
name), and a prompt too long for the context is refused by the upstream when the stream
starts, not by prepare() (the test below).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.conftest import THREADS, ServerProcess, running
from tests.e2e.llama_server import LlamaServer
from tests.test_engine_contract import (
    chat,
    run,
    test_cancelling_the_consumer_task_stops_the_stream,
    test_closing_the_stream_early_leaves_the_engine_usable,
    test_concurrent_streams_all_finish,
    test_greedy_is_deterministic,
    test_max_tokens_gives_length,
    test_raw_prompt_completion,
    test_seeded_sampling_is_reproducible,
    test_stream_has_start_text_finish_and_usage,
)
from tokenpipe.engines.base import Engine
from tokenpipe.engines.openai import OpenAIEngine
from tokenpipe.errors import BadRequest, ContextOverflow
from tokenpipe.types import GenerationRequest

pytestmark = pytest.mark.e2e

__all__ = [  # the contract's own tests, collected here with this module's `engine`
    "test_cancelling_the_consumer_task_stops_the_stream",
    "test_closing_the_stream_early_leaves_the_engine_usable",
    "test_concurrent_streams_all_finish",
    "test_greedy_is_deterministic",
    "test_max_tokens_gives_length",
    "test_raw_prompt_completion",
    "test_seeded_sampling_is_reproducible",
    "test_stream_has_start_text_finish_and_usage",
]

CONTEXT = 4096
# Each upstream gives a request CONTEXT tokens: the fake engine gives each the whole
# --ctx-size, tokenpipe's llama.cpp engine the shared half of its tiered KV cache,
# llama-server here splits its context over its 2 parallel sequences. tokenpipe announces
# it as max_model_len; llama-server announces nothing, so the engine keeps the
# context_tokens it was given; vLLM runs with --max-model-len CONTEXT (tests/e2e/vllm_server.py).
UPSTREAMS = {
    "fake": ("--engine", "fake", "--ctx-size", str(CONTEXT)),
    "llamacpp": ("--threads", str(THREADS), "--ctx-size", str(2 * CONTEXT)),
}


@pytest.fixture(scope="module", params=[
    "fake", pytest.param("llamacpp", marks=pytest.mark.model),
    pytest.param("llama-server", marks=pytest.mark.model),
    # grouped with test_vllm.py (conftest GROUPS): the session's vLLM starts once
    pytest.param("vllm", marks=[pytest.mark.model])])
def upstream_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "vllm":  # the session's, left running for the other vLLM tests
        yield request.getfixturevalue("vllm_servers")[0]
        return
    if request.param != "fake" and not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    server: ServerProcess | LlamaServer
    if request.param == "llama-server":
        server = LlamaServer(ctx_size=CONTEXT * 2, parallel=2)
    else:
        server = ServerProcess((*UPSTREAMS[request.param], "--parallel", "2"))
    with running(server):
        yield server


@pytest.fixture
async def engine(upstream_server: Any) -> AsyncIterator[Engine]:
    # Built in the test's own event loop: its HTTP connections belong to that loop.
    eng = OpenAIEngine([upstream_server.url], context_tokens=CONTEXT, parallel=2)
    await eng.load()
    yield eng
    await eng.aclose()


async def test_context_overflow_is_refused(engine: Engine) -> None:
    with pytest.raises(ContextOverflow):
        engine.prepare(chat("word " * 10, max_tokens=CONTEXT), 64)
    too_long = engine.prepare(GenerationRequest(prompt="word " * (CONTEXT + 10)), 64)
    with pytest.raises(ContextOverflow):
        await run(engine, too_long.request)


async def test_logprobs_are_refused_naming_them(engine: Engine) -> None:
    """The openai engine does not pass logprobs upstream yet: a 400 naming them, not an
    answer without them."""
    with pytest.raises(BadRequest) as refused:
        engine.prepare(chat("Hi.", max_tokens=4, logprobs=2), 64)
    assert refused.value.param == "logprobs"
