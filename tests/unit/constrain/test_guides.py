"""Grammars and token masks (constrain/) over the bundled model's real vocabulary: what a
mask allows, that a guided generation can only write what the schema admits, that a schema
the library cannot enforce is refused naming the parameter, and the cache."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Iterator

import numpy as np
import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

import llama_cpp as lc

from tokenpipe.constrain import Guides, check_request
from tokenpipe.constrain.grammars import grammar_of, schema_text
from tokenpipe.engines.base import bundled_model_path
from tokenpipe.errors import BadRequest
from tokenpipe.types import OutputFormat

pytestmark = pytest.mark.model


class Vocab:
    def __init__(self) -> None:
        lc.llama_backend_init()
        params = lc.llama_model_default_params()
        params.vocab_only = True
        self.model = lc.llama_model_load_from_file(str(bundled_model_path()).encode(), params)
        self.handle = lc.llama_model_get_vocab(self.model)
        self.n = lc.llama_vocab_n_tokens(self.handle)

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self.handle, token, buf, len(buf), 0, False)
        return buf.raw[:n]


@pytest.fixture(scope="module")
def vocab() -> Iterator[Vocab]:
    v = Vocab()
    yield v
    lc.llama_model_free(v.model)


@pytest.fixture(scope="module")
def guides(vocab: Vocab) -> Guides:
    return Guides.for_llamacpp(vocab.handle, vocab.n)


def schema(value: object) -> OutputFormat:
    return OutputFormat("json_schema", schema_text(value), "s")


def allowed(guides: Guides, fmt: OutputFormat, vocab: Vocab) -> set[int]:
    guide = guides.start(grammar_of(fmt))
    logits = np.zeros(vocab.n, dtype=np.float32)
    guide.constrain(logits)
    return {int(t) for t in np.flatnonzero(logits == 0)}


def test_an_enum_allows_only_the_pieces_that_begin_one_of_its_values(
        guides: Guides, vocab: Vocab) -> None:
    fmt = schema({"enum": ["yes", "no"]})
    first = allowed(guides, fmt, vocab)
    assert first, "the mask allows nothing"
    texts = {vocab.piece(t) for t in first}
    assert all(b'"yes"'.startswith(t.lstrip()) or b'"no"'.startswith(t.lstrip())
               for t in texts), texts
    assert b'"' in texts
    assert len(first) < 100  # a handful out of 49152


def test_a_guided_walk_writes_only_what_the_schema_admits(guides: Guides,
                                                          vocab: Vocab) -> None:
    """The worst case for a mask: at every step pick an allowed token at random (seeded),
    as a sampler at a high temperature would; the result always validates."""
    import jsonschema

    spec = {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "tag": {"enum": ["red", "green"]},
        "xs": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}},
        "required": ["n", "tag", "xs"], "additionalProperties": False}
    rng = np.random.default_rng(3)
    for _ in range(20):
        guide = guides.start(grammar_of(schema(spec)))
        out = b""
        for _ in range(400):
            logits = np.zeros(vocab.n, dtype=np.float32)
            guide.constrain(logits)
            choices = np.flatnonzero(logits == 0)
            token = int(rng.choice(choices))
            if token == lc.llama_vocab_eos(vocab.handle):
                break
            assert guide.accept(token), guide.error
            out += vocab.piece(token)
            if guide.done:
                break
        else:
            pytest.fail(f"no end after 400 tokens: {out!r}")
        jsonschema.validate(json.loads(out), spec)


@pytest.mark.parametrize(("value", "reason"), [
    ({"not": {"type": "string"}}, "Unimplemented keys"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "Unsatisfiable"),
    ({"$ref": "#/$defs/missing"}, "does not exist"),
    ({"$ref": "https://example.com/schema.json"}, "example.com"),
    ({"type": "strnig"}, "strnig"),
    ({"type": "string", "format": "no-such-format"}, "Unknown format"),
    (False, "admits no value"),
])
def test_a_schema_that_cannot_be_enforced_is_refused_naming_the_parameter(
        guides: Guides, value: object, reason: str) -> None:
    with pytest.raises(BadRequest) as caught:
        param = "params.response_format"
        guides.check(grammar_of(schema(value), param), param)
    assert caught.value.param == "params.response_format"
    assert reason in caught.value.message


@pytest.mark.parametrize("value", [
    {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
     "$ref": "#/$defs/node"},
    {"anyOf": [{"type": "string", "pattern": "^[a-z]{3}$"}, {"type": "integer"}]},
    {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "number"}}, "required": ["b"]}}, "required": ["a"]},
    True,
    {"const": {"kind": "fixed"}},
    {"oneOf": [{"type": "boolean"}, {"type": "null"}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
               {"required": ["a"]}]},
    {"type": ["string", "integer", "null"]},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "string", "minLength": 2, "maxLength": 5},
    {"type": "array", "items": {"type": "string", "format": "email"}, "maxItems": 2},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "date-time"},
    {"type": "object", "patternProperties": {"^x_": {"type": "integer"}},
     "additionalProperties": False},
])
def test_the_json_schema_features_apps_use_compile(guides: Guides, value: object) -> None:
    guides.check(grammar_of(schema(value)), "response_format")


def test_a_compiled_grammar_is_kept_and_each_generation_gets_its_own_state(
        guides: Guides, vocab: Vocab) -> None:
    fmt = schema({"enum": ["alpha", "beta"]})
    guides.check(grammar_of(fmt), "response_format")
    kept = dict(guides._compiled)  # the cache itself: what a second check reuses
    guides.check(grammar_of(fmt), "response_format")
    assert dict(guides._compiled).keys() == kept.keys()
    at_start = allowed(guides, fmt, vocab)
    quote = next(t for t in at_start if vocab.piece(t) == b'"')
    one = guides.start(grammar_of(fmt))
    one.constrain(np.zeros(vocab.n, dtype=np.float32))
    assert one.accept(quote)
    after_quote = np.zeros(vocab.n, dtype=np.float32)
    one.constrain(after_quote)
    assert after_quote[quote] != 0  # inside the string now: no second opening quote
    assert allowed(guides, fmt, vocab) == at_start  # a new generation starts afresh


def test_a_large_grammar_is_not_kept_and_its_generation_starts_from_the_check(
        guides: Guides) -> None:
    """A grammar estimated over KEEP_BYTES (a schema of 1,950 optional keys: ~85 KiB of
    grammar, 7-10 MB compiled) is not kept in the cache, so distinct large schemas cannot
    fill memory; its generation starts from what check() compiled (the decode thread
    never compiles it again). A small grammar is kept."""
    from tokenpipe.constrain import guide as guide_module

    large = grammar_of(schema({"type": "object", "properties": {
        f"o{j}": {"type": "object", "properties": {
            f"k{j}_{i}": {"type": "string"} for i in range(390)}} for j in range(5)}}))
    assert guide_module.BYTES_PER_CHAR * len(large) > guide_module.KEEP_BYTES
    compiled = guides.check(large, "response_format")
    assert large not in guides._compiled
    started = guides.start(large, compiled=compiled)
    assert large not in guides._compiled  # started from `compiled`: nothing compiled again
    logits = np.zeros(guides.n_logits, dtype=np.float32)
    started.constrain(logits)
    assert 0 < int(np.sum(logits == 0)) < guides.n_vocab  # a real mask: the object's start
    small = grammar_of(schema({"enum": ["kept", "too"]}))
    guides.check(small, "response_format")
    assert small in guides._compiled
    assert guides.cached_bytes <= guide_module.CACHE_BYTES


def test_rows_wider_than_the_vocabulary_never_allow_the_padding(guides: Guides,
                                                                vocab: Vocab) -> None:
    guide = guides.start(grammar_of(OutputFormat("json_object")))
    logits = np.zeros(vocab.n + 64, dtype=np.float32)
    guide.constrain(logits)
    assert np.all(np.isneginf(logits[vocab.n:]))
    assert np.any(logits[: vocab.n] == 0)


@pytest.mark.parametrize(("extra", "admitted"), [(None, False), (False, False), (True, True),
                                                 ({"type": "integer"}, True)])
def test_an_object_admits_undeclared_keys_only_when_its_schema_says_so(
        guides: Guides, extra: object, admitted: bool) -> None:
    """The grammar itself (not a check after the fact): with no additionalProperties, the
    mask never lets a key the schema does not declare be written (constrain/schemas.py)."""
    import llguidance

    value: dict[str, object] = {"type": "object", "properties": {"a": {"type": "string"}},
                                "required": ["a"]}
    if extra is not None:
        value["additionalProperties"] = extra
    grammar = grammar_of(schema(value))

    def whole(text: str) -> bool:
        tokens = guides.tokenizer.tokenize_str(text)
        matcher = llguidance.LLMatcher(guides.tokenizer, grammar, log_level=0)
        return matcher.validate_tokens(tokens) == len(tokens) and (
            matcher.consume_tokens(tokens) and matcher.is_accepting())

    assert whole('{"a": "x"}')
    assert whole('{"a": "x", "b": 1}') is admitted


def test_a_guide_goes_on_from_a_prefill_so_both_together_validate(
        guides: Guides, vocab: Vocab) -> None:
    """An answer begun in a last assistant message: the guide starts after it, so a random
    walk from there (as test_a_guided_walk_... does) always completes the prefill's
    document; a prefill no document of the format begins with is a 400 naming messages."""
    import jsonschema

    spec = {"type": "object", "properties": {"tag": {"enum": ["red", "green"]},
                                             "n": {"type": "integer", "maximum": 99}},
            "required": ["tag", "n"]}
    grammar = grammar_of(schema(spec))
    rng = np.random.default_rng(5)
    for prefill in ('{"tag": "gr', '{\n  "tag"', "{"):
        guides.check(grammar, "response_format", prefill)
        guide = guides.start(grammar, "response_format", prefill)
        out = prefill.encode()
        for _ in range(100):
            logits = np.zeros(vocab.n, dtype=np.float32)
            guide.constrain(logits)
            token = int(rng.choice(np.flatnonzero(logits == 0)))
            if token == lc.llama_vocab_eos(vocab.handle):
                break
            assert guide.accept(token), guide.error
            out += vocab.piece(token)
        jsonschema.validate(json.loads(out), spec)
    for prefill in ("Sure: {", '{"tag": "blue', '{"tag": "red"}}'):
        with pytest.raises(BadRequest) as refused:
            guides.check(grammar, "response_format", prefill)
        assert refused.value.param == "messages" and "prefill" in refused.value.message


def test_a_thinking_budget_cannot_go_on_from_a_prefill(guides: Guides) -> None:
    from tokenpipe.types import GenerationRequest, Message

    request = GenerationRequest(messages=(Message("user", "hi"), Message("assistant", "So")),
                                reasoning_budget=16)
    with pytest.raises(BadRequest) as refused:
        check_request(lambda: guides, request, "So")
    assert refused.value.param == "reasoning_budget"
    check_request(lambda: guides, request, "")  # the same request without its prefill compiles
