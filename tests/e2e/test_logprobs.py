"""Logprobs on the real bundled model (llama.cpp) through a real server: the values are
llama.cpp's own logits (checked against the model loaded in this process), streamed equal
whole, the official `openai` SDK reads them, the tokenpipe.v1 client gets the same ones,
and a client that asked for none sees no logprobs."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests.conftest import THREADS, ServerProcess, closed_after_test
from tests.e2e.vllm_server import vllm_home
from tokenpipe.client import Client
from tokenpipe.engines.base import bundled_model_path
from tokenpipe.engines.llamacpp.exact import GGML_TYPE_BF16

PROMPT = "The three primary colors are"
COLORS = [{"role": "user", "content": "Name three colors, one per line."}]
TOLERANCE = 1e-3  # float32 logits, the same kernels as the server's (exact.py)


def sdk(server: ServerProcess) -> openai.OpenAI:
    return closed_after_test(openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0))


def test_completion_logprobs_are_llama_cpps_logits_for_the_same_greedy_request(
        model_server: ServerProcess) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 5}
    answer = httpx.post(model_server.url + "/v1/completions", json=body, timeout=120).json()
    choice = answer["choices"][0]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == answer["usage"]["completion_tokens"] == 12
    assert "".join(lp["tokens"]) == choice["text"]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(12)]

    # the server's kernels: flash attention over a BF16 KV cache (--determinism exact)
    llm = llama_cpp.Llama(str(bundled_model_path()), logits_all=True, n_ctx=256, n_threads=THREADS,
                          flash_attn=True, type_k=GGML_TYPE_BF16, type_v=GGML_TYPE_BF16,
                          verbose=False)
    try:
        ids = llm.tokenize(PROMPT.encode(), add_bos=True)
        llm.eval(ids)
        for i, token in enumerate(lp["tokens"]):
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            peak = row.max()
            logsoftmax = row - (peak + math.log(np.exp(row - peak).sum()))
            best = int(np.argmax(row))
            assert llm.detokenize([best]).decode() == token, (i, token)
            assert lp["token_logprobs"][i] == pytest.approx(logsoftmax[best], abs=TOLERANCE)
            near = {llm.detokenize([int(t)]).decode(errors="replace"): logsoftmax[t]
                    for t in np.argsort(-row)[:10]}
            assert len(lp["top_logprobs"][i]) == 5
            for alt, value in lp["top_logprobs"][i].items():
                assert value == pytest.approx(near[alt], abs=TOLERANCE), (i, alt)
            llm.eval([best])
    finally:
        llm.close()


def test_chat_logprobs_through_the_openai_sdk_streamed_equal_whole(
        model_server: ServerProcess) -> None:
    client = sdk(model_server)
    ask: dict[str, Any] = {"model": "SmolLM2-135M-Instruct", "messages": COLORS,
                           "max_tokens": 24, "temperature": 0, "logprobs": True,
                           "top_logprobs": 3}
    whole = client.chat.completions.create(**ask)
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert whole.usage is not None and content
    assert len(content) == whole.usage.completion_tokens  # the end token is not counted
    first = content[0]
    assert len(first.top_logprobs) == 3 and first.top_logprobs[0].token == first.token
    assert first.top_logprobs[0].logprob == first.logprob <= 0
    assert bytes(b for e in content for b in e.bytes or ()).decode() == \
        whole.choices[0].message.content

    streamed = []
    text = ""
    for chunk in client.chat.completions.create(**ask, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
            assert chunk.choices[0].logprobs is not None
            got = chunk.choices[0].logprobs.content or []
            # a chunk's logprobs are the tokens its text completes
            assert bytes(b for e in got for b in e.bytes or ()).decode() == \
                chunk.choices[0].delta.content
            streamed += got
    assert text == whole.choices[0].message.content
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]


def test_a_stop_strings_tokens_are_left_out_on_the_real_model(
        model_server: ServerProcess) -> None:
    client = sdk(model_server)
    ask: dict[str, Any] = {"model": "SmolLM2-135M-Instruct", "messages": COLORS,
                           "max_tokens": 24, "temperature": 0, "logprobs": True}
    free = client.chat.completions.create(**ask).choices[0].message.content or ""
    cut_at = free.index("\n") + 2  # stop inside the second line
    stop = free[cut_at:cut_at + 3]
    for stream in (False, True):
        if stream:
            chunks = list(client.chat.completions.create(**ask, stop=[stop], stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            entries = [e for c in chunks if c.choices and c.choices[0].logprobs
                       for e in c.choices[0].logprobs.content or ()]
        else:
            answer = client.chat.completions.create(**ask, stop=[stop])
            text = answer.choices[0].message.content or ""
            entries = answer.choices[0].logprobs.content or []  # type: ignore[union-attr]
        assert text == free[:cut_at]
        spelled = bytes(b for e in entries for b in e.bytes or ()).decode()
        # every reported token showed some text; none lies wholly inside the stop string
        assert spelled.startswith(text) and len(spelled) - len(text) < len(entries[-1].token)


def test_the_ws_client_gets_the_same_logprobs_and_others_see_none(
        model_server: ServerProcess) -> None:
    chat = httpx.post(model_server.url + "/v1/chat/completions", timeout=120, json={
        "messages": COLORS, "max_tokens": 16, "temperature": 0, "logprobs": True,
        "top_logprobs": 2}).json()

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with Client(model_server.ws_url) as client:
            asked = await client.generate(COLORS, params={
                "max_tokens": 16, "logprobs": True, "top_logprobs": 2})
            plain = await client.generate(COLORS, params={"max_tokens": 16})
            await asked.collect()
            await plain.collect()
            assert asked.text == plain.text == chat["choices"][0]["message"]["content"]
            return asked.logprobs, plain.deltas

    logprobs, plain_deltas = asyncio.run(main())
    assert logprobs == chat["choices"][0]["logprobs"]["content"]
    assert all("logprobs" not in d for d in plain_deltas)
    plain = httpx.post(model_server.url + "/v1/chat/completions", timeout=120, json={
        "messages": COLORS, "max_tokens": 4}).json()
    assert plain["choices"][0]["logprobs"] is None


def test_completion_logprobs_streamed_equal_whole(model_server: ServerProcess) -> None:
    body = {"prompt": PROMPT, "max_tokens": 10, "temperature": 0, "logprobs": 2}
    whole = httpx.post(model_server.url + "/v1/completions", json=body, timeout=120).json()
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                    "text_offset": []}
    with httpx.stream("POST", model_server.url + "/v1/completions", timeout=120,
                      json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                piece = json.loads(line[6:])["choices"][0]["logprobs"]
                for key in merged:
                    merged[key] += (piece or {}).get(key, [])
    assert merged == whole["choices"][0]["logprobs"]


def test_tokens_that_split_a_character_arrive_with_the_chunk_that_completes_it(
        model_server: ServerProcess) -> None:
    ask: dict[str, Any] = {"model": "SmolLM2-135M-Instruct", "max_tokens": 40,
                           "temperature": 0, "logprobs": True, "messages": [
                               {"role": "user", "content": "Say good morning in Japanese "
                                "(おはようございます) and add an emoji 🌅."}]}
    client = sdk(model_server)
    entries = []
    for chunk in client.chat.completions.create(**ask, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            got = chunk.choices[0].logprobs.content or []  # type: ignore[union-attr]
            assert bytes(b for e in got for b in e.bytes or ()).decode() == \
                chunk.choices[0].delta.content
            entries += got
    halves = [e for e in entries if not _decodes(bytes(e.bytes or ()))]
    assert halves, "the answer had no token that ends inside a character"
    assert all(e.token == bytes(e.bytes or ()).decode(errors="replace") for e in halves)


def _decodes(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_the_transformers_engine_gives_them_through_the_same_path(
        live_server: Any) -> None:
    """The same door, scheduler and alignment over the transformers engine (the bundled
    model through transformers): streamed equal whole, one entry per token. It loads the
    Hugging Face folder the vLLM set-up wrote from the bundled GGUF where there is one (a
    second of loading, against 8 s of CPU to convert the GGUF again: the transformers
    group's tests load the GGUF itself once a session)."""
    pytest.importorskip("transformers")
    folder = vllm_home() / "model"
    model = folder if (folder / "model.safetensors").is_file() else bundled_model_path()
    url = live_server("--engine", "transformers", "--model", str(model), "--parallel", "1")
    client = closed_after_test(openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0))
    ask: dict[str, Any] = {"model": client.models.list().data[0].id, "messages": COLORS,
                           "max_tokens": 12, "temperature": 0, "logprobs": True,
                           "top_logprobs": 2}
    whole = client.chat.completions.create(**ask)
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert whole.usage is not None and content
    assert len(content) == whole.usage.completion_tokens
    assert all(e.top_logprobs[0].token == e.token and e.logprob <= 0 for e in content)
    streamed = [e for chunk in client.chat.completions.create(**ask, stream=True)
                if chunk.choices and chunk.choices[0].logprobs
                for e in chunk.choices[0].logprobs.content or ()]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]
