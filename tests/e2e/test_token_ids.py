"""vLLM's `return_token_ids` on tokenpipe's OpenAI doors, and a /v1/completions prompt of
token ids, in vLLM's fields: chat chunks carry `prompt_token_ids` (the first that has them)
and each choice's `token_ids`; completions carry both in the choice; whole answers the
same. On the fake engine (its ids are its bytes: they decode back to the text) and on the
bundled model (a prompt of the ids tokenpipe returned answers as the text did)."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess
from tokenpipe.engines.fake import fake_token_bytes

pytestmark = pytest.mark.e2e
USER = [{"role": "user", "content": "Hello there"}]


def streamed(url: str, path: str, body: dict[str, Any]) -> tuple[list[int], list[int], str]:
    """(the prompt's ids, the answer's ids, its text) of a streamed answer."""
    prompt: list[int] = []
    ids: list[int] = []
    texts: list[str] = []
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            prompt = prompt or chunk.get("prompt_token_ids") or []
            for choice in chunk["choices"]:
                prompt = prompt or choice.get("prompt_token_ids") or []
                ids += choice.get("token_ids") or []
                texts.append((choice["delta"].get("content") or "") if "delta" in choice
                             else choice["text"])
    return prompt, ids, "".join(texts)


def text_of(ids: list[int]) -> str:
    return b"".join(fake_token_bytes(i) for i in ids).decode()


def test_return_token_ids_on_both_doors(fake_server: ServerProcess) -> None:
    url = fake_server.url
    prompt, ids, text = streamed(url, "/v1/chat/completions", {
        "messages": USER, "max_tokens": 40, "return_token_ids": True})
    assert len(ids) == 40 and text_of(ids) == text
    assert text_of(prompt).startswith("<|user|>Hello there")
    whole = httpx.post(url + "/v1/chat/completions", timeout=60, json={
        "messages": USER, "max_tokens": 40, "return_token_ids": True}).json()
    assert whole["prompt_token_ids"] == prompt and whole["choices"][0]["token_ids"] == ids
    plain = httpx.post(url + "/v1/chat/completions", timeout=60, json={
        "messages": USER, "max_tokens": 4}).json()
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    raw_prompt, raw_ids, raw_text = streamed(url, "/v1/completions", {
        "prompt": "Once upon", "max_tokens": 12, "return_token_ids": True})
    assert text_of(raw_prompt) == "Once upon" and text_of(raw_ids) == raw_text


def test_a_prompt_of_token_ids(fake_server: ServerProcess) -> None:
    """The ids are read as they are: the fake reads them back as the text they encode,
    and answers as it answers that text; a negative id is refused naming the prompt."""
    url = fake_server.url
    by_text = streamed(url, "/v1/completions", {
        "prompt": "[[tokens=30]]", "max_tokens": 20, "return_token_ids": True})
    by_ids = streamed(url, "/v1/completions", {
        "prompt": by_text[0], "max_tokens": 20, "return_token_ids": True})
    assert by_ids == by_text
    refused = httpx.post(url + "/v1/completions", timeout=60,
                         json={"prompt": [3, -1], "max_tokens": 4})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt"


@pytest.mark.model
def test_the_model_answers_its_own_token_ids_as_their_text(
        model_server: ServerProcess) -> None:
    """On llama.cpp: the prompt's ids as tokenpipe returned them (with the BOS it added)
    give the same greedy answer, ids and all; an id past the vocabulary is a 400."""
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    url = model_server.url
    body = {"max_tokens": 16, "temperature": 0, "return_token_ids": True}
    prompt, ids, text = streamed(url, "/v1/completions",
                                 {**body, "prompt": "The capital of France is"})
    assert prompt and len(ids) == 16 and text.strip()
    assert streamed(url, "/v1/completions", {**body, "prompt": prompt}) == (prompt, ids, text)
    chat = streamed(url, "/v1/chat/completions", {**body, "messages": USER})
    going_on = streamed(url, "/v1/completions", {**body, "prompt": chat[0] + chat[1][:8],
                                                 "max_tokens": 8})
    assert chat[1][8:] == going_on[1] and chat[2].endswith(going_on[2])
    refused = httpx.post(url + "/v1/completions", timeout=60,
                         json={"prompt": [10**9], "max_tokens": 4})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt"
