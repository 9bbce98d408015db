"""Speculative decoding never changes the answer (issue 33): on the bundled model, 20 prompts
(half of them answered by copying from the prompt), greedy and seeded, with and without an
output grammar, give the same text byte for byte with `--speculate ngram` as without; the
drafted and accepted counts are those that the answer's tokens imply.

One engine: it reads `speculate` when a sequence starts, so the test switches it between
runs. The policy is `always` (every draft found, up to 8 tokens): what the adaptive policy
drafts depends on this machine's timings, the answer must not."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")

import llama_cpp as lc

from tests.conftest import THREADS
from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.llamacpp import LlamaCppEngine
from tokenpipe.engines.llamacpp.speculate import Lookup, Speculation, VerifyCost
from tokenpipe.errors import EngineError
from tokenpipe.types import (
    EngineFinish,
    EngineText,
    FinishReason,
    GenerationRequest,
    Message,
    OutputFormat,
    SamplingParams,
    Usage,
)

pytestmark = pytest.mark.model

TOKENS = 12  # the same answer is the point, not its length
DRAFT = 4  # drafted tokens a step, at most: rows cost nearly their number on this CPU
PASSAGE = ("The museum opens at nine in the morning and closes at six in the evening. "
           "Tickets cost twelve euros for adults and six euros for children.")
CODE = "def area(width, height):\n    return width * height\n"
GROUNDED = [
    f"Repeat this text exactly: {PASSAGE}",
    f"Copy this sentence word for word: {PASSAGE}",
    f"Rewrite this text in the past tense: {PASSAGE}",
    f"Summarize this text in one sentence: {PASSAGE}",
    f"Rename the function area to rectangle_area in this code:\n{CODE}",
    f"Add a docstring to this function:\n{CODE}",
    "Correct the spelling: The quick brwon fox jumsp over the lazzy dog.",
    "Write this list again, sorted: banana, apple, cherry, date, elderberry.",
    "Translate to uppercase: the cat sat on the mat and the dog sat on the log.",
    "Repeat after me: one two three four five six seven eight nine ten.",
]
FREE = ["Write a haiku about rain.", "What is a river?", "Why is the sky blue?",
        "Name three colors.", "How do birds fly?", "Explain gravity to a child.",
        "Give me a recipe for tea.", "Tell me a joke.", "What is the capital of France?",
        "Describe a sunset."]
PROMPTS = GROUNDED + FREE
JSON = OutputFormat("json_object")


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    options = EngineOptions(context_size=4096, parallel=2, threads=THREADS)
    eng = LlamaCppEngine(options.with_values(kv_cache="split", speculate="ngram",
                                             speculate_policy="always",
                                             speculate_draft=DRAFT))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


def ask(prompt: str, seed: int | None, grammar: bool) -> GenerationRequest:
    sampled = {} if seed is None else {"temperature": 0.8, "top_p": 0.95, "seed": seed}
    return GenerationRequest(messages=(Message("user", prompt),), format=JSON if grammar
                             else None, params=SamplingParams(max_tokens=TOKENS, **sampled))


async def run(engine: LlamaCppEngine, request: GenerationRequest, speculate: str
              ) -> tuple[list[str], Usage, FinishReason, int]:
    """Each token's text, the usage, the finish, and the drafted count the text events
    carried."""
    engine.speculate = speculate
    pieces: list[str] = []
    carried = 0
    finish = None
    async for event in engine.stream(engine.prepare(request, TOKENS)):
        if isinstance(event, EngineText):
            if event.tokens:  # a token's text (not a step's counts, not the last flush)
                pieces.append(event.text)
            carried += event.drafted
        elif isinstance(event, EngineFinish):
            finish = event
    assert finish is not None
    return pieces, finish.usage, finish.reason, carried


def implied(prompt: list[int], answer: list[int], limit: int) -> tuple[int, int]:
    """(drafted, accepted) that speculate.py's `always` policy must report for an answer of
    these tokens: a step drafts what the lookup finds, at most `limit` - generated - 1
    tokens, and the answer takes the drafted tokens up to the first that differs, then
    one token more (the one sampled where they part, or after the last drafted)."""
    drafted = accepted = 0
    made = 1  # the first token comes from the prompt's own step
    while made < len(answer):
        lookup = Lookup(prompt + answer[:made])
        draft = lookup.draft(min(limit - made - 1, DRAFT)) if limit - made - 1 > 0 else []
        took = 0
        while took < len(draft) and made + took < len(answer) and \
                draft[took] == answer[made + took]:
            took += 1
        drafted, accepted = drafted + len(draft), accepted + took
        made += took + (made + took < len(answer))
    return drafted, accepted


def answer_ids(engine: LlamaCppEngine, pieces: list[str], reason: FinishReason
               ) -> list[int] | None:
    """The answer's token ids, where tokenizing its text gives back its pieces one for one
    (else None); the end-of-generation token last when the answer stopped on it."""
    ids = engine.tokenize("".join(pieces))
    if [engine._vocab.piece(i).decode(errors="replace") for i in ids] != pieces:
        return None
    if reason is FinishReason.STOP:
        ids.append(lc.llama_vocab_eos(engine._vocab.handle))
    return ids


@pytest.mark.parametrize("grammar", [False, True], ids=["free", "json"])
async def test_speculation_gives_the_same_answer_byte_for_byte(
    engine: LlamaCppEngine, grammar: bool,
) -> None:
    differ: dict[str, tuple[str, str]] = {}
    drafted = accepted = checked = 0
    for i, prompt in enumerate(PROMPTS):
        for seed in (None, 100 + i):
            request = ask(prompt, seed, grammar)
            plain, plain_usage, _, _ = await run(engine, request, "off")
            spec, usage, reason, carried = await run(engine, request, "ngram")
            if "".join(plain) != "".join(spec):
                differ[f"{prompt[:30]} seed={seed}"] = ("".join(plain), "".join(spec))
            assert plain_usage.drafted_tokens == 0
            assert usage.completion_tokens == plain_usage.completion_tokens
            assert carried == usage.drafted_tokens  # the events carried every draft
            assert 0 <= usage.accepted_tokens <= usage.drafted_tokens
            drafted, accepted = drafted + usage.drafted_tokens, accepted + usage.accepted_tokens
            ids = None if grammar else answer_ids(engine, spec, reason)
            if ids is not None:
                prompt_ids = list(engine.prepare(request, TOKENS).prompt_ids)
                assert (usage.drafted_tokens, usage.accepted_tokens) == implied(
                    prompt_ids, ids, TOKENS), prompt
                checked += 1
    assert differ == {}
    # drafts were made, taken and refused: every path of the verification ran
    assert 0 < accepted < drafted
    print(f"\n{'json' if grammar else 'free'}: {drafted} drafted, {accepted} accepted, "
          f"counts checked against the tokens on {checked} answers")
    if not grammar:
        assert checked >= 20


async def test_a_grammar_rejects_a_draft_it_forbids(engine: LlamaCppEngine) -> None:
    """The prompt is full of text that is not JSON, so the lookup drafts it; under the
    grammar the answer is JSON all the same, and equal to the one without drafts."""
    request = ask(f"Repeat this text exactly: {PASSAGE}", None, True)
    plain, _, _, _ = await run(engine, request, "off")
    spec, usage, _, _ = await run(engine, request, "ngram")
    assert spec == plain and "".join(spec).lstrip().startswith("{")
    assert usage.drafted_tokens > usage.accepted_tokens


def test_speculation_needs_one_decode_for_its_rows() -> None:
    with pytest.raises(EngineError, match="determinism exact"):
        LlamaCppEngine(EngineOptions().with_values(speculate="ngram", determinism="serial"))


def test_the_lookup_drafts_what_followed_the_longest_suffix_seen_before() -> None:
    lookup = Lookup([1, 2, 3, 4, 5, 9, 2, 3, 7, 3])
    assert lookup.draft(3) == [7, 3]  # "3" last came before "7 3" (no longer suffix)
    lookup.append(4)  # "3 4" occurred at the start
    assert lookup.draft(3) == [5, 9, 2]
    assert Lookup([1, 2, 3]).draft(4) == []


def test_the_adaptive_policy_drafts_only_where_the_price_and_acceptance_pay() -> None:
    tokens = [5, 6, 7, 8, 9, 10, 11, 12, 13, 5]  # "5" is followed by 8 known tokens
    cheap, dear = VerifyCost(), VerifyCost()
    for rows in range(1, 10):
        cheap.record(rows, 0.010 + 0.001 * (rows - 1))  # weights read once: rows nearly free
        dear.record(rows, 0.010 * rows * 1.2)  # this CPU: each row costs more than one alone
    assert len(Speculation(Lookup(tokens), rate=0.95).plan(8, cheap)) == 8
    assert 0 < len(Speculation(Lookup(tokens), rate=0.7).plan(8, cheap)) < 8  # shorter pays
    assert Speculation(Lookup(tokens)).plan(8, dear) == []
    doubtful = Speculation(Lookup(tokens), rate=0.05)  # its drafts were rarely taken
    assert doubtful.plan(8, cheap) == []
    assert Speculation(Lookup(tokens), policy="always").plan(8, dear) == tokens[1:9]
    assert Speculation(Lookup(tokens)).plan(8, VerifyCost()) == tokens[1:3]  # a probe
    partly = VerifyCost()
    partly.record(1, 0.010)
    partly.record(3, 0.030)  # 2 drafts cost 3 rows: every width is priced from it
    assert Speculation(Lookup(tokens)).plan(8, partly) == []
