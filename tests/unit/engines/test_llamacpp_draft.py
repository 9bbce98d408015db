"""Draft-model speculation never changes the answer (issue 33, `--speculate draft
--draft-model NAME`): the bundled model is the only GGUF here, so it drafts for itself (a
context of its own, llama.cpp's fast kernels: its drafts are nearly always right, not
always). Prompts grounded and free, greedy and seeded, with and without an output grammar
(any JSON object, a JSON schema), give the same text byte for byte as without drafts; the
counts add up; the draft model's cells follow the accepted tokens; after a fault it has a
fresh context too; a draft model of another vocabulary is refused at load.

One engine, as in test_llamacpp_speculate.py: it reads `speculate` when a sequence starts,
so the test switches it between "off" and "draft"; the policy is `always`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

import llama_cpp as lc

from tests.conftest import THREADS
from tests.unit.engines.test_llamacpp_speculate import DRAFT, FREE, GROUNDED, TOKENS, ask, run
from tokenpipe.engines.base import EngineOptions, bundled_model_path
from tokenpipe.engines.llamacpp import LlamaCppEngine
from tokenpipe.engines.llamacpp.draft import DraftModel, vocab_mismatch
from tokenpipe.engines.llamacpp.speculate import Speculation, VerifyCost
from tokenpipe.errors import EngineError
from tokenpipe.types import EngineText, OutputFormat

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[3]
PROMPTS = GROUNDED[::4] + FREE[::4]  # 3 and 3 (the ngram tests have 20)


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    options = EngineOptions(context_size=4096, parallel=2, threads=THREADS)
    eng = LlamaCppEngine(options.with_values(
        kv_cache="split", speculate="draft", draft_model=str(bundled_model_path()),
        speculate_policy="always", speculate_draft=DRAFT))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


SCHEMA = OutputFormat("json_schema", json.dumps({
    "type": "object", "properties": {"answer": {"type": "string"},
                                     "words": {"type": "integer"}},
    "required": ["answer", "words"]}))


@pytest.mark.parametrize("grammar", [None, "schema"])  # any JSON object: the ngram tests
async def test_the_draft_model_gives_the_same_answer_byte_for_byte(
    engine: LlamaCppEngine, grammar: str | None,
) -> None:
    differ: dict[str, tuple[str, str]] = {}
    drafted = accepted = greedy_drafted = greedy_accepted = 0
    for i, prompt in enumerate(PROMPTS):
        for seed in (None, 200 + i):
            request = ask(prompt, seed, grammar is not None)
            if grammar == "schema":
                request = dataclasses.replace(request, format=SCHEMA)
            plain, plain_usage, _, _ = await run(engine, request, "off")
            spec, usage, _, carried = await run(engine, request, "draft")
            if "".join(plain) != "".join(spec):
                differ[f"{prompt[:30]} seed={seed}"] = ("".join(plain), "".join(spec))
            assert plain_usage.drafted_tokens == plain_usage.accepted_tokens == 0
            assert usage.completion_tokens == plain_usage.completion_tokens
            assert carried == usage.drafted_tokens  # the events carried every draft
            assert 0 <= usage.accepted_tokens <= usage.drafted_tokens
            # the first token comes from the prompt's step; each later step takes at most
            # DRAFT drafts and the one sampled after them
            assert usage.accepted_tokens <= usage.completion_tokens - 1
            assert usage.drafted_tokens <= DRAFT * (usage.completion_tokens - 1)
            drafted, accepted = drafted + usage.drafted_tokens, accepted + usage.accepted_tokens
            if seed is None:
                greedy_drafted += usage.drafted_tokens
                greedy_accepted += usage.accepted_tokens
    assert differ == {}
    assert drafted > 0
    print(f"\n{grammar or 'free'}: {drafted} drafted, {accepted} accepted; "
          f"greedy {greedy_drafted} / {greedy_accepted}")
    if grammar is None:  # the model drafting for itself: greedy drafts are nearly all taken
        assert greedy_accepted >= 0.8 * greedy_drafted


def test_the_draft_models_cells_follow_the_accepted_tokens(engine: LlamaCppEngine) -> None:
    """A draft after a rejection keeps the accepted prefix and removes the cells of the
    drafts that were not taken; a draft for another sequence keeps their common prefix."""
    draft = engine._draft
    assert draft is not None and draft.context is not None
    tokens = list(engine.prepare(ask(GROUNDED[0], None, False), TOKENS).prompt_ids)

    def pos_max() -> int:
        assert draft.context is not None
        return int(lc.llama_memory_seq_pos_max(draft.context.mem, 0))

    # (called here: the decode thread, idle between tests, leaves the draft model alone)
    first = draft.draft(tokens, 4)
    assert len(first) == 4 and draft.cached == tokens + first[:3]
    assert pos_max() == len(draft.cached) - 1
    # the answer took the first draft, then sampled a token other than the second
    other = (first[1] + 1) % draft.n_tokens
    second = draft.draft([*tokens, first[0], other], 4)
    assert draft.cached == [*tokens, first[0], other, *second[:3]]
    assert pos_max() == len(draft.cached) - 1
    # another sequence with half of this prompt
    half = tokens[: len(tokens) // 2]
    assert draft.draft(half, 1) and draft.cached == half
    assert pos_max() == len(half) - 1
    # longer than its context: no draft
    assert draft.draft([1] * (draft.context.context_tokens + 1), 2) == []


async def test_after_a_fault_the_draft_model_has_a_fresh_context_too(
    engine: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A decode that fails mid-answer (drafts in flight) ends that answer; the engine's fresh
    contexts include the draft model's, which drafts again, the answer unchanged."""
    request = ask(GROUNDED[0], None, False)
    plain, _, _, _ = await run(engine, request, "off")
    armed = threading.Event()
    real = lc.llama_decode

    def decode(ctx: Any, batch: Any) -> int:
        if armed.is_set():
            armed.clear()
            raise RuntimeError("injected fault")
        return int(real(ctx, batch))

    monkeypatch.setattr(lc, "llama_decode", decode)
    old = engine._draft.context if engine._draft else None
    engine.speculate = "draft"
    with pytest.raises(EngineError, match="injected fault"):
        async for event in engine.stream(engine.prepare(request, TOKENS)):
            if isinstance(event, EngineText) and event.drafted:
                armed.set()  # the next decode fails: the draft model's or the model's
    deadline = time.monotonic() + 30
    while engine.restarts < 1:
        assert time.monotonic() < deadline, "no recovery"
        await asyncio.sleep(0.01)
    assert engine._draft is not None and engine._draft.context not in (None, old)
    again, usage, _, _ = await run(engine, request, "draft")
    assert again == plain and usage.accepted_tokens > 0


def test_a_draft_model_of_another_vocabulary_is_refused_at_load(tmp_path: Path) -> None:
    other = tmp_path / "other-vocab.gguf"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "random_gguf.py"), str(other),
                    "--vocab", "40000", "--embd", "64", "--layers", "1", "--heads", "2",
                    "--kv-heads", "1", "--ff", "128"], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    eng = LlamaCppEngine(EngineOptions(context_size=512, parallel=1, threads=THREADS)
                         .with_values(draft_model=str(other)))
    try:
        with pytest.raises(EngineError, match=r"other-vocab\.gguf and the model SmolLM2.*"
                                              r"different vocabularies \(49152 tokens "
                                              r"against 40000\)"):
            asyncio.run(eng.load())
    finally:
        asyncio.run(eng.aclose())


def test_the_vocabularies_are_compared_token_by_token() -> None:
    assert vocab_mismatch([b"a", b"b"], [b"a", b"b"]) is None
    assert vocab_mismatch([b"a", b"b"], [b"a"]) == "2 tokens against 1"
    assert vocab_mismatch([b"a", b"b", b"c"], [b"a", b"x", b"c"]) == (
        "token 1 is b'b' in one and b'x' in the other")


def test_the_draft_options_go_together() -> None:
    path = str(bundled_model_path())
    with pytest.raises(EngineError, match="needs --draft-model"):
        LlamaCppEngine(EngineOptions().with_values(speculate="draft"))
    with pytest.raises(EngineError, match="not --speculate ngram"):
        LlamaCppEngine(EngineOptions().with_values(speculate="ngram", draft_model=path))
    with pytest.raises(EngineError, match="determinism exact"):
        LlamaCppEngine(EngineOptions().with_values(draft_model=path, determinism="serial"))
    assert LlamaCppEngine(EngineOptions().with_values(draft_model=path)).speculate == "draft"
    with pytest.raises(EngineError, match="draft model file not found"):
        DraftModel.load(Path("/nonexistent.gguf"), [], "m")


class Priced:
    """A draft source whose drafts cost `seconds` a token: the lengths it was asked for."""

    priced = True

    def __init__(self, seconds: float | None) -> None:
        self.seconds_per_token = seconds
        self.asked: list[int] = []

    def append(self, token: int) -> None:
        pass

    def draft(self, k: int) -> list[int]:
        self.asked.append(k)
        return list(range(k))


def test_the_adaptive_policy_counts_what_drafting_costs() -> None:
    """The draft model's own decodes join the price of a draft, and the length is chosen
    before the draft model runs (no draft: it is not asked at all)."""
    cheap = VerifyCost()
    for rows in range(1, 10):
        cheap.record(rows, 0.010 + 0.001 * (rows - 1))  # rows nearly free
    tiny = Priced(0.0005)  # a draft model 20 times cheaper than the model
    assert len(Speculation(tiny, rate=0.9).plan(8, cheap)) > 2
    same = Priced(0.010)  # the model drafting for itself: a draft costs a step
    assert Speculation(same, rate=0.9).plan(8, cheap) == [] and same.asked == []
    unpriced = Priced(None)  # not timed yet: priced as free until it is
    assert Speculation(unpriced, rate=0.9).plan(8, cheap) == list(range(8))
    assert Speculation(Priced(0.010), policy="always").plan(3, cheap) == [0, 1, 2]
