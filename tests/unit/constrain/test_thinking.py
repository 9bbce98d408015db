"""A thinking budget's grammar (constrain/thinking.py) on the bundled model's vocabulary: a
walk that picks any allowed token at random (seeded, the worst case for a mask: it would
almost never close the section by itself) writes a thinking section of at most the budget's
tokens, closed by `</think>`, then an answer of the kind the request asks for."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np
import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

import llama_cpp as lc

from tests.unit.constrain.test_guides import Vocab
from tokenpipe.constrain import Guides, grammar_for
from tokenpipe.constrain.grammars import schema_text
from tokenpipe.types import GenerationRequest, Message, OutputFormat, Tool, ToolChoice

pytestmark = pytest.mark.model
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def vocab() -> Iterator[Vocab]:
    v = Vocab()
    yield v
    lc.llama_model_free(v.model)


@pytest.fixture(scope="module")
def guides(vocab: Vocab) -> Guides:
    return Guides.for_llamacpp(vocab.handle, vocab.n)


def walk(guides: Guides, vocab: Vocab, request: GenerationRequest, *, inside: bool,
         seed: int, steps: int = 120) -> tuple[list[bytes], bool]:
    grammar = grammar_for(request, inside=inside)
    assert grammar is not None
    guides.check(*grammar)
    guide = guides.start(grammar[0])
    rng = np.random.default_rng(seed)
    eos = lc.llama_vocab_eos(vocab.handle)
    pieces: list[bytes] = []
    for _ in range(steps):
        logits = np.zeros(vocab.n, dtype=np.float32)
        guide.constrain(logits)
        token = int(rng.choice(np.flatnonzero(logits == 0)))
        if token == eos:
            return pieces, True
        assert guide.accept(token), guide.error
        pieces.append(vocab.piece(token))
        if guide.done:
            return pieces, True
    return pieces, False


def thought_tokens(pieces: list[bytes], inside: bool) -> tuple[int, bytes]:
    """How many tokens went by before the one that completed `</think>`, less those of the
    opening tag; and the text after the close."""
    text = b""
    opened = 0 if inside else None
    for n, piece in enumerate(pieces):
        text += piece
        if opened is None and text.startswith(b"<think>") and len(text) >= 7:
            opened = n + 1
        if b"</think>" in text:
            assert opened is not None
            return n + 1 - opened, b"".join(pieces).split(b"</think>", 1)[1]
    pytest.fail(f"the section was never closed: {text!r}")


def chat(**fields: object) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", "hi"),), split_reasoning=True,
                             **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("inside", [False, True], ids=["opened-here", "prompt-opened"])
@pytest.mark.parametrize("budget", [4, 24])
def test_the_close_is_forced_once_the_budget_is_spent(guides: Guides, vocab: Vocab,
                                                      budget: int, inside: bool) -> None:
    spent = []
    for seed in range(6):
        pieces, _ = walk(guides, vocab, chat(reasoning_budget=budget), inside=inside,
                         seed=seed)
        if not inside:
            assert b"".join(pieces).startswith(b"<think>")  # the grammar opens it
        used, _ = thought_tokens(pieces, inside)
        # the close tag takes a few tokens of its own once the body is cut
        assert used <= budget + len("</think>"), (used, b"".join(pieces))
        spent.append(used)
    assert max(spent) >= budget  # a random walk never closes early: the budget did


def test_after_the_section_the_answer_is_the_format_or_the_calls(guides: Guides,
                                                                vocab: Vocab) -> None:
    import jsonschema

    fmt = OutputFormat("json_schema", schema_text(SCHEMA))
    pieces, done = walk(guides, vocab, chat(reasoning_budget=6, format=fmt), inside=False,
                        seed=1, steps=400)
    assert done
    _, answer = thought_tokens(pieces, inside=False)
    jsonschema.validate(json.loads(answer), SCHEMA)

    tool = Tool("f", None, schema_text(SCHEMA))
    pieces, done = walk(guides, vocab, chat(reasoning_budget=6, tools=(tool,),
                                            tool_choice=ToolChoice("required",
                                                                   parallel=False)),
                        inside=True, seed=2, steps=400)
    assert done
    _, answer = thought_tokens(pieces, inside=True)
    call = answer.lstrip(b"\n")
    assert call.startswith(b'<tool_call>\n{"name": "f", "arguments": ')
    assert call.endswith(b"}\n</tool_call>")
    args = call.removeprefix(b'<tool_call>\n{"name": "f", "arguments": ')[:-len(
        b"}\n</tool_call>")]
    jsonschema.validate(json.loads(args), SCHEMA)

