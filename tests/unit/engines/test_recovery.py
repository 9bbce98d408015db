"""A fault in an engine's own loop ends only the generations in flight, with the reason, and
the engine recovers by itself (a fresh loop; for llama.cpp a fresh context), the model kept
loaded. Faults are injected into the real loops on the real bundled model."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import THREADS, chat
from tokenpipe.config import engine_class
from tokenpipe.engines.base import Engine, EngineOptions, bundled_model_path
from tokenpipe.errors import EngineError, EngineUnavailable
from tokenpipe.types import EngineFinish, EngineText

pytestmark = pytest.mark.model
NEEDS = {"llamacpp": "llama_cpp", "transformers": "transformers"}


@pytest.fixture(params=["llamacpp", "transformers"])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    name = request.param
    if not os.environ.get("CI"):
        pytest.importorskip(NEEDS[name], reason=f"the {name} extra is not installed")
    if name == "transformers":  # the GGUF loaded once a session (tests/conftest.py)
        request.getfixturevalue("transformers_loads_once")
    model = str(bundled_model_path()) if name == "transformers" else None
    eng = engine_class(name).from_options(
        EngineOptions(model=model, context_size=1024, parallel=2, threads=THREADS))
    asyncio.run(eng.load())
    yield eng
    asyncio.run(eng.aclose())


class Fault:
    """Makes the engine's next step raise, from the test, at a moment it chooses."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, engine: Engine) -> None:
        self.armed = threading.Event()
        if engine.info.name == "llamacpp":
            import llama_cpp as lc

            real = lc.llama_decode

            def decode(ctx: Any, batch: Any) -> int:
                self._maybe_raise()
                return int(real(ctx, batch))

            monkeypatch.setattr(lc, "llama_decode", decode)
        else:
            real_step = engine._decode  # type: ignore[attr-defined]

            def step(*args: Any) -> Any:
                self._maybe_raise()
                return real_step(*args)

            monkeypatch.setattr(engine, "_decode", step)
            monkeypatch.setattr(engine, "_admit", _raising(self, engine._admit))  # type: ignore[attr-defined]

    def _maybe_raise(self) -> None:
        if self.armed.is_set():
            self.armed.clear()
            raise RuntimeError("injected fault")


def _raising(fault: Fault, real: Any) -> Any:
    def admit(*args: Any) -> Any:
        fault._maybe_raise()
        return real(*args)

    return admit


async def answer(engine: Engine, text: str, max_tokens: int = 8) -> str:
    prepared = engine.prepare(chat(text, max_tokens=max_tokens), 64)
    events = [e async for e in engine.stream(prepared)]
    assert isinstance(events[-1], EngineFinish)
    return "".join(e.text for e in events if isinstance(e, EngineText))


async def wait_for(check: Any, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_loop_fault_fails_what_was_running_and_the_engine_recovers(
    engine: Engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fault = Fault(monkeypatch, engine)
    long = [engine.prepare(chat("Write a long story about the sea.", max_tokens=200), 64)
            for _ in range(2)]

    async def run(prepared: Any, arm: bool) -> BaseException | None:
        texts = 0
        try:
            async for event in engine.stream(prepared):
                if isinstance(event, EngineText) and event.text:
                    texts += 1
                    if arm and texts == 3:
                        fault.armed.set()
        except EngineError as exc:
            return exc
        return None

    errors = await asyncio.wait_for(asyncio.gather(run(long[0], True), run(long[1], False)), 120)
    for error in errors:  # both generations in flight ended, with the reason
        assert isinstance(error, EngineError) and "injected fault" in error.message
    await wait_for(lambda: engine.restarts == 1)
    assert engine.failures == 1 and engine.failure is None
    assert engine.healthy()
    assert await answer(engine, "Say hi.")  # the same loaded model answers again


async def test_an_engine_that_cannot_recover_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    if not os.environ.get("CI"):
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    import llama_cpp as lc

    engine = engine_class("llamacpp").from_options(
        EngineOptions(context_size=512, parallel=1, threads=THREADS))
    await engine.load()
    try:
        fault = Fault(monkeypatch, engine)
        monkeypatch.setattr(lc, "llama_init_from_model", lambda model, params: None)
        fault.armed.set()
        with pytest.raises(EngineError, match="injected fault"):
            await answer(engine, "Say hi.")
        await wait_for(lambda: engine.failure is not None)
        assert "a fresh context failed too" in (engine.failure or "")
        assert not engine.healthy()
        with pytest.raises(EngineUnavailable, match="fresh context failed"):
            await answer(engine, "Say hi.")
    finally:
        await engine.aclose()
