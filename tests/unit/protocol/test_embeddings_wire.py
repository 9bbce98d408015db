"""The embedding routes' wire shapes: OpenAI's request and answer (floats, base64 of
little-endian float32), Ollama's /api/embed and /api/embeddings; and how the llama.cpp
embedder groups inputs into decode steps."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest
from pydantic import ValidationError

from tokenpipe.engines.base import Embedded
from tokenpipe.protocol.ollama.embed import (
    EmbedRequest,
    LegacyEmbeddingsRequest,
    embed_answer,
    legacy_answer,
)
from tokenpipe.protocol.openai.embeddings import EmbeddingRequest, as_base64, embedding_list
from tokenpipe.protocol.openai.errors import validation_error


@pytest.mark.parametrize(("sent", "inputs"), [
    ("hello", ["hello"]),
    (["a", "b c"], ["a", "b c"]),
    ([1, 2, 3], [[1, 2, 3]]),
    ([[1, 2], [3]], [[1, 2], [3]]),
])
def test_openai_input_kinds(sent: Any, inputs: list[Any]) -> None:
    assert EmbeddingRequest.model_validate({"input": sent, "model": "m"}).inputs() == inputs


@pytest.mark.parametrize("sent", ["", [], [""], [[]], [1, "a"], [-1], [[1], []], [[1], ["a"]],
                                  3, None, [True], ["x"] * 2049])
def test_openai_bad_input_is_a_400_naming_input(sent: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        EmbeddingRequest.model_validate({"input": sent})
    error = validation_error(caught.value.errors())
    assert error.status == 400 and error.param is not None
    assert error.param == "input" and error.message.startswith("Invalid value for 'input'")


def test_openai_unknown_fields_and_formats_are_refused() -> None:
    for body in ({"input": "a", "encoding_format": "int8"}, {"input": "a", "nope": 1},
                 {"input": "a", "dimensions": 0}):
        with pytest.raises(ValidationError) as caught:
            EmbeddingRequest.model_validate(body)
        assert validation_error(caught.value.errors()).param in (
            "encoding_format", "nope", "dimensions")


def test_openai_answer_floats_and_base64() -> None:
    embedded = Embedded([[0.5, -0.25], [1.0, 0.0]], prompt_tokens=7)
    floats = embedding_list("m", embedded, "float").model_dump()
    assert floats == {"object": "list", "model": "m",
                      "usage": {"prompt_tokens": 7, "total_tokens": 7},
                      "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
                               {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]}]}
    packed = embedding_list("m", embedded, "base64").data[0].embedding
    assert isinstance(packed, str) and packed == as_base64([0.5, -0.25])
    assert struct.unpack("<2f", base64.b64decode(packed)) == (0.5, -0.25)


def test_ollama_embed_request_and_answer() -> None:
    assert EmbedRequest.model_validate({"model": "m", "input": "hi"}).inputs() == ["hi"]
    assert EmbedRequest.model_validate({"model": "m", "input": ["a", "b"]}).inputs() == [
        "a", "b"]
    for empty in ({"model": "m"}, {"model": "m", "input": ""}, {"model": "m", "input": []}):
        assert EmbedRequest.model_validate(empty).inputs() == []  # Ollama's "load it"
    body = EmbedRequest.model_validate({"model": "m", "input": "x", "keep_alive": "5m"})
    assert body.truncate is True and body.keep_alive_s == 300
    with pytest.raises(ValidationError):
        EmbedRequest.model_validate({"model": "m", "input": [1, 2]})
    answer = embed_answer("m", Embedded([[0.6, 0.8]], 3), 0.5)
    assert answer == {"model": "m", "embeddings": [[0.6, 0.8]], "total_duration": 500000000,
                      "load_duration": 0, "prompt_eval_count": 3}


def test_ollama_legacy_embeddings() -> None:
    body = LegacyEmbeddingsRequest.model_validate({"model": "m", "prompt": "hi"})
    assert body.inputs() == ["hi"]
    assert LegacyEmbeddingsRequest.model_validate({"model": "m"}).inputs() == []
    assert legacy_answer(Embedded([[0.6, 0.8]], 3)) == {"embedding": [0.6, 0.8]}
    assert legacy_answer(Embedded([], 0)) == {"embedding": []}


def test_llamacpp_groups_keep_order_and_bounds() -> None:
    pytest.importorskip("llama_cpp")
    from tokenpipe.engines.llamacpp.embed import _groups

    inputs = [[1] * 3, [2] * 3, [3] * 5, [4] * 1, [5] * 9, [6]]
    groups = [list(g) for g in _groups(inputs, 6, 2)]
    assert [x for g in groups for x in g] == inputs
    assert groups == [[[1] * 3, [2] * 3], [[3] * 5, [4]], [[5] * 9], [[6]]]
