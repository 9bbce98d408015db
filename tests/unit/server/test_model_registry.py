"""Load on demand (server/sessions.py, server/model_slots.py) on the fake engine: the
registry's own behaviour (states, keep-alive, LRU eviction, a failing model alone). The
same on the real bundled model: tests/e2e/test_load_on_demand.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tokenpipe.engines.base import Engine
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.errors import EngineError, EngineUnavailable
from tokenpipe.scheduler import Scheduler
from tokenpipe.server.model_slots import ModelSlot
from tokenpipe.server.sessions import ModelRegistry
from tokenpipe.session import Delta, Failed, Finished, GenerationSession, Queued
from tokenpipe.types import FinishReason, GenerationRequest, SamplingParams


class CountingEngine(FakeEngine):
    """The fake engine, counting loads and frees; `load_s` makes a load take time."""

    loads = 0
    frees = 0

    def __init__(self, name: str, load_s: float = 0.0, fail: bool = False) -> None:
        super().__init__(model_id=name)
        self.load_s, self.fail = load_s, fail

    async def load(self) -> None:
        await asyncio.sleep(self.load_s)
        if self.fail:
            raise EngineError(f"{self.info.model_id}.gguf is not a model")
        type(self).loads += 1
        await super().load()

    async def aclose(self) -> None:
        type(self).frees += 1
        await super().aclose()


def slot(name: str, keep_alive_s: float = -1.0, **engine: float | bool) -> ModelSlot:
    def make() -> Engine:
        return CountingEngine(name, **engine)  # type: ignore[arg-type]

    return ModelSlot(name, make, lambda e: Scheduler(e), keep_alive_s)


def registry(*slots: ModelSlot, max_loaded: int = 0) -> ModelRegistry:
    models = ModelRegistry(max_loaded=max_loaded)
    for s in slots:
        models.add(s)
    return models


def ask(model: str, prompt: str = "[[echo]] hi") -> GenerationRequest:
    return GenerationRequest(prompt=prompt, model=model, params=SamplingParams(max_tokens=50))


async def read(session: GenerationSession) -> list[object]:
    return [event async for event in session.cursor()]


async def until(check: Callable[[], bool]) -> None:
    """Polls a state the registry changes from its own timers (nothing to wait on)."""
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


@pytest.fixture(autouse=True)
def counts() -> None:
    CountingEngine.loads = CountingEngine.frees = 0


async def test_a_model_loads_when_first_asked_for_and_the_request_hears_loading() -> None:
    models = registry(slot("a", load_s=0.1))
    assert models.states() == {"a": "available"} and models.ready
    session = await models.start(ask("a"))
    assert models.states() == {"a": "loading"}
    events = await read(session)
    assert events[0] == Queued(0, loading=True)
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "hi"
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.STOP
    assert models.states() == {"a": "loaded"} and CountingEngine.loads == 1
    again = await models.start(ask("a", "[[echo]] again"))  # loaded: no loading event
    assert not any(isinstance(e, Queued) for e in await read(again))
    assert CountingEngine.loads == 1


async def test_requests_that_come_during_a_load_share_it() -> None:
    models = registry(slot("a", load_s=0.2))
    sessions = [await models.start(ask("a", f"[[echo]] {i}")) for i in range(3)]
    texts = [[e.text for e in await read(s) if isinstance(e, Delta)] for s in sessions]
    assert texts == [["0"], ["1"], ["2"]] and CountingEngine.loads == 1


async def test_keep_alive_unloads_an_idle_model_and_the_next_request_loads_it_again() -> None:
    models = registry(slot("a", keep_alive_s=0.1))
    await read(await models.start(ask("a")))
    assert models.states() == {"a": "loaded"}
    await until(lambda: models.states() == {"a": "available"})
    assert CountingEngine.frees == 1
    events = await read(await models.start(ask("a")))
    assert events[0] == Queued(0, loading=True) and CountingEngine.loads == 2


async def test_a_running_generation_keeps_its_model_past_the_keep_alive() -> None:
    models = registry(slot("a", keep_alive_s=0.05))
    session = await models.start(ask("a", "[[pace_ms=20]][[tokens=20]]"))
    await asyncio.sleep(0.2)  # past the keep-alive, still generating
    assert models.states() == {"a": "loaded"}
    events = await read(session)
    assert sum(isinstance(e, Delta) for e in events) >= 1 and isinstance(events[-1], Finished)
    await until(lambda: models.states() == {"a": "available"})


async def test_max_loaded_evicts_the_least_recently_used_idle_model() -> None:
    models = registry(slot("a"), slot("b"), slot("c"), max_loaded=2)
    for name in ("a", "b"):
        await read(await models.start(ask(name)))
    await read(await models.start(ask("a")))  # a is now more recent than b
    await read(await models.start(ask("c")))
    assert models.states() == {"a": "loaded", "b": "available", "c": "loaded"}
    assert CountingEngine.frees == 1


async def test_a_model_with_a_running_generation_is_never_evicted() -> None:
    models = registry(slot("a"), slot("b"), max_loaded=1)
    long = await models.start(ask("a", "[[pace_ms=10]][[tokens=30]]"))
    other = await models.start(ask("b"))
    await asyncio.sleep(0.1)
    assert models.states() == {"a": "loaded", "b": "loading"}  # b waits for room
    first, second = await asyncio.gather(read(long), read(other))
    assert isinstance(first[-1], Finished) and first[-1].usage.completion_tokens == 30
    assert "".join(e.text for e in second if isinstance(e, Delta)) == "hi"
    assert models.states() == {"a": "available", "b": "loaded"}


async def test_a_model_that_fails_to_load_fails_its_own_requests_only() -> None:
    models = registry(slot("good"), slot("bad", fail=True))
    bad = await models.start(ask("bad"))
    good = await models.start(ask("good"))
    failed = (await read(bad))[-1]
    assert isinstance(failed, Failed) and "bad.gguf is not a model" in failed.error.message
    assert isinstance((await read(good))[-1], Finished)
    assert models.states() == {"good": "loaded", "bad": "failed"}
    assert models.failure is not None and "bad.gguf" in models.failure
    with pytest.raises(EngineUnavailable, match=r"bad\.gguf"):  # at once, while recent
        await models.start(ask("bad"))
    models.check_serving()  # one model serves: listings answer


async def test_cancel_while_loading_ends_the_request_and_the_load_goes_on() -> None:
    models = registry(slot("a", load_s=0.2))
    session = await models.start(ask("a"))
    await asyncio.sleep(0.05)
    session.cancel()
    events = await read(session)
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.CANCELLED
    await until(lambda: models.states() == {"a": "loaded"})


async def test_a_load_waiting_for_room_that_is_shut_down_fails_with_shutting_down() -> None:
    models = registry(slot("a", load_s=5.0))
    session = await models.start(ask("a"))
    await models.aclose(0)
    final = (await read(session))[-1]
    assert isinstance(final, Failed) and final.error.code == "shutting_down"


async def test_a_failed_load_makes_room_for_one_that_waited() -> None:
    models = registry(slot("bad", load_s=0.1, fail=True), slot("good"), max_loaded=1)
    bad = await models.start(ask("bad"))
    await asyncio.sleep(0.02)  # bad's load holds the one place
    good = await models.start(ask("good"))
    assert isinstance((await read(bad))[-1], Failed)
    final = (await asyncio.wait_for(read(good), 5))[-1]
    assert isinstance(final, Finished) and models.states()["good"] == "loaded"
