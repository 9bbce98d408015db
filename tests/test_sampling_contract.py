"""Every sampling parameter runs on every engine, alone and together, greedy and sampled,
and has its effect where the effect can be seen (issue "Every parameter on every engine").

The real llama.cpp and transformers engines run the bundled model; the fake engine's text
is scripted, so on it only "the answer arrives" is checked. `stop` is the scheduler's work
(the engines never see it): it runs through a Scheduler here, as every door does.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import THREADS, chat
from tokenpipe.config import engine_class
from tokenpipe.engines.base import Engine, EngineOptions
from tokenpipe.scheduler import Scheduler
from tokenpipe.session import Delta, Failed, Finished
from tokenpipe.types import EngineFinish, EngineText, FinishReason

ENGINES = ["fake", "llamacpp", "transformers"]
NEEDS = {"llamacpp": "llama_cpp", "transformers": "transformers"}
REPEATS = "Write the word 'hello' ten times."
N = 24  # tokens an answer

# Each sampling parameter, alone, on a greedy and on a sampled request.
ALONE: list[dict[str, Any]] = [
    {"temperature": 0.8, "seed": 7},
    {"top_p": 0.5, "temperature": 0.8, "seed": 7},
    {"top_k": 5, "temperature": 0.8, "seed": 7},
    {"min_p": 0.2, "temperature": 0.8, "seed": 7},
    {"repetition_penalty": 1.3},
    {"repetition_penalty": 1.3, "temperature": 0.8, "seed": 7},
    {"presence_penalty": 1.0},
    {"presence_penalty": -0.5, "temperature": 0.8, "seed": 7},
    {"frequency_penalty": 1.0},
    {"frequency_penalty": 0.5, "temperature": 0.8, "seed": 7},
    {"seed": 123},  # greedy: the seed changes nothing
    {"max_tokens": 3},
]
TOGETHER: dict[str, Any] = {"temperature": 0.9, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
                            "repetition_penalty": 1.1, "presence_penalty": 0.3,
                            "frequency_penalty": 0.3, "seed": 11}


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    name = request.param
    if name in NEEDS and not os.environ.get("CI"):
        pytest.importorskip(NEEDS[name], reason=f"the {name} extra is not installed")
    if name == "transformers":  # the GGUF loaded once a session (tests/conftest.py)
        request.getfixturevalue("transformers_loads_once")
    model = None
    if name == "transformers":  # the same bundled GGUF, loaded through transformers
        from tokenpipe.engines.base import bundled_model_path

        model = str(bundled_model_path())
    eng = engine_class(name).from_options(
        EngineOptions(model=model, context_size=2048, parallel=2, threads=THREADS))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


async def answer(engine: Engine, text: str, **params: Any) -> tuple[str, EngineFinish]:
    params.setdefault("max_tokens", N)
    prepared = engine.prepare(chat(text, **params), 64)
    events = [e async for e in engine.stream(prepared)]
    finish = events[-1]
    assert isinstance(finish, EngineFinish)
    text_out = "".join(e.text for e in events if isinstance(e, EngineText))
    assert "\ufffd" not in text_out
    return text_out, finish


def real(engine: Engine) -> bool:
    return engine.info.name != "fake"


# The effect of sampling is visible only on a real model (the fake engine's text is scripted)
on_real_models = pytest.mark.parametrize("engine", ["llamacpp", "transformers"], indirect=True)


@pytest.mark.parametrize("params", [*ALONE, TOGETHER], ids=lambda p: ",".join(sorted(p)))
async def test_each_parameter_runs_and_the_engine_stays_healthy(
    engine: Engine, params: dict[str, Any],
) -> None:
    text, finish = await answer(engine, REPEATS, **params)
    assert text
    limit = params.get("max_tokens", N)
    assert 1 <= finish.usage.completion_tokens <= limit
    if params.get("max_tokens") == 3:
        assert finish.reason is FinishReason.LENGTH and finish.usage.completion_tokens == 3
    assert engine.healthy()
    if "seed" in params and real(engine):  # seeded (or greedy): the same text again
        assert (await answer(engine, REPEATS, **params))[0] == text


@on_real_models
@pytest.mark.parametrize("penalty", [{"repetition_penalty": 1.5},
                                     {"presence_penalty": 1.5},
                                     {"frequency_penalty": 1.5}], ids=lambda p: next(iter(p)))
async def test_a_penalty_changes_a_greedy_answer_that_repeats(
    engine: Engine, penalty: dict[str, float],
) -> None:
    plain, _ = await answer(engine, REPEATS)
    assert plain.lower().count("hello") >= 4, plain  # the model repeats when it is asked to
    penalized, _ = await answer(engine, REPEATS, **penalty)
    assert penalized != plain
    assert penalized.lower().count("hello") < plain.lower().count("hello")


@on_real_models
@pytest.mark.parametrize("narrow", [{"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}],
                         ids=lambda p: next(iter(p)))
async def test_a_filter_that_keeps_one_token_equals_greedy(
    engine: Engine, narrow: dict[str, float],
) -> None:
    greedy, _ = await answer(engine, "Tell me about the sea.")
    sampled, _ = await answer(engine, "Tell me about the sea.", temperature=1.5, seed=5,
                              **narrow)
    assert sampled == greedy


@on_real_models
async def test_seeds_make_sampled_answers_reproducible_and_different(engine: Engine) -> None:
    question = "Write a sentence about a dog."
    texts = {seed: (await answer(engine, question, temperature=1.2, seed=seed))[0]
             for seed in (1, 2, 3)}
    assert (await answer(engine, question, temperature=1.2, seed=2))[0] == texts[2]
    assert len(set(texts.values())) > 1  # three seeds, not three times one answer


async def test_stop_ends_the_answer_before_the_stop_string(engine: Engine) -> None:
    scheduler = Scheduler(engine)
    full, _ = await answer(engine, REPEATS)
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert stop.strip(), full
    session = scheduler.submit(chat(REPEATS, max_tokens=N, stop=(stop,)))
    text = ""
    async for event in session.events():
        if isinstance(event, Delta):
            text += event.text
        elif isinstance(event, Failed):
            raise AssertionError(event.error)
        elif isinstance(event, Finished):
            assert event.reason is FinishReason.STOP
    assert text == full[: full.index(stop)]
    assert stop not in text
