"""constrain/vocabularies.py: the grammar library's view of a vocabulary is built on first
use, once per model file and process (a model loaded again finds it), the last few kept;
the engine's load builds none (issue 31 item 5: the build holds the GIL ~100 ms)."""

from __future__ import annotations

import functools
import json
import os
import threading

import pytest

from tokenpipe.constrain import vocabularies
from tokenpipe.constrain.vocabularies import KEPT, OnFirstUse, View, llamacpp_view, shared
from tokenpipe.errors import BadRequest


class Token:
    """A stand-in for an LLTokenizer (the cache holds whatever a build returns)."""


def test_a_view_is_built_once_per_key_and_the_last_few_are_kept() -> None:
    built: list[str] = []

    def build(key: str) -> View:
        built.append(key)
        return View(Token())  # type: ignore[arg-type]

    keys = [f"test-{i}" for i in range(KEPT + 1)]
    first = shared(keys[0], lambda: build(keys[0]))
    assert shared(keys[0], lambda: build(keys[0])) is first and built == keys[:1]
    for key in keys[1:]:
        shared(key, functools.partial(build, key))
    assert keys[0] not in vocabularies._views  # the oldest went
    shared(keys[0], lambda: build(keys[0]))
    assert built == [*keys, keys[0]]


def test_a_view_frees_what_it_reads_when_it_goes() -> None:
    freed = threading.Event()
    view = View(Token(), freed.set)  # type: ignore[arg-type]
    del view
    assert freed.is_set()


def test_on_first_use_builds_once_and_tries_again_after_a_failure() -> None:
    calls = []

    def build() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("not yet")
        return len(calls)

    value = OnFirstUse(build)
    with pytest.raises(RuntimeError):
        value.result()
    assert value.result() == 2 and value.result() == 2 and len(calls) == 2


@pytest.mark.model
async def test_a_model_loaded_again_reuses_its_view() -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    from tokenpipe.engines.base import EngineOptions, bundled_model_path
    from tokenpipe.engines.llamacpp import LlamaCppEngine
    from tokenpipe.types import GenerationRequest, Message, OutputFormat

    formatted = GenerationRequest(messages=(Message("user", "hi"),),
                                  format=OutputFormat("json_object"))
    schema: dict[str, object] = {"type": "integer"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}}
    too_deep = GenerationRequest(messages=(Message("user", "hi"),), format=OutputFormat(
        "json_schema", json.dumps(schema), "s"))
    tokenizers = []
    for _ in range(2):
        engine = LlamaCppEngine(EngineOptions(parallel=1, context_size=256, threads=1))
        try:
            await engine.load()
            assert engine._guides._value is None  # the load built nothing
            with pytest.raises(BadRequest):  # nor does a schema refused before any compile
                engine.prepare(too_deep, 8)
            assert engine._guides._value is None
            engine.prepare(formatted, 8)  # the first format builds it (or finds it)
            tokenizers.append(engine._guides.result().tokenizer)
        finally:
            await engine.aclose()
    assert tokenizers[0] is tokenizers[1]
    assert tokenizers[0] is llamacpp_view(bundled_model_path()).tokenizer
