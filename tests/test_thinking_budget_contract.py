"""A thinking budget (GenerationRequest.reasoning_budget, constrain/thinking.py) over every
local engine on the real bundled model: the answer opens a thinking section, spends at most
the budget's tokens in it, closes it, then answers, greedy and sampled hot; the fake
engine, which cannot constrain, refuses it naming reasoning_budget."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterator

import pytest

from tests.conftest import THREADS, chat
from tests.test_engine_contract import _model_for
from tokenpipe.config import engine_class
from tokenpipe.engines.base import Engine, EngineOptions
from tokenpipe.errors import BadRequest
from tokenpipe.types import EngineText, FinishReason, GenerationRequest

ENGINES = ["fake", "llamacpp", "transformers"]
NEEDS = {"llamacpp": "llama_cpp", "transformers": "transformers"}


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    name = request.param
    if name in NEEDS and not os.environ.get("CI"):
        pytest.importorskip(NEEDS[name], reason=f"the {name} extra is not installed")
    if name == "transformers":  # the GGUF loaded once a session (tests/conftest.py)
        request.getfixturevalue("transformers_loads_once")
    options = EngineOptions(model=_model_for(name), context_size=4096, parallel=2, threads=THREADS)
    eng = engine_class(name).from_options(options)
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


def budgeted(budget: int, **params: object) -> GenerationRequest:
    return dataclasses.replace(chat("What is 2 + 2? Think first.", **params),
                               split_reasoning=True, reasoning_budget=budget)


@pytest.mark.parametrize("temperature", [0.0, 1.5])
async def test_the_section_spends_at_most_the_budget_then_the_answer_starts(
        engine: Engine, temperature: float) -> None:
    budget = 8
    request = budgeted(budget, max_tokens=60, temperature=temperature, seed=3)
    if engine.info.name == "fake":
        with pytest.raises(BadRequest) as refused:
            engine.prepare(request, 64)
        assert refused.value.param == "reasoning_budget"
        return
    events = [e async for e in engine.stream(engine.prepare(request, 64))]
    pieces = [e for e in events if isinstance(e, EngineText)]
    text = ""
    inside = closed = None
    for n, piece in enumerate(pieces):  # token by token: where the tags open and close
        text += piece.text
        if inside is None and text.startswith("<think>"):
            inside = n + 1
        if closed is None and "</think>" in text:
            closed = n + 1
    assert inside is not None and closed is not None, text
    # the tokens from the open tag's end to the close tag's end: the body and the close
    assert closed - inside <= budget + len("</think>"), text
    answer = text.split("</think>", 1)[1]
    assert answer.strip() or events[-1].reason is FinishReason.LENGTH, text
