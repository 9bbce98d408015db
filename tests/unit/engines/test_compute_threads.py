"""Every llama_decode of the llama.cpp engine runs on its decode thread (the load-time check's
too), or, for embeddings, on a thread that has ended, with its OpenMP workers, by the time
the request is answered: a thread that decoded and lived on keeps an OpenMP team that slows
every later decode of the process (engines/llamacpp/compute.py; scripts/omp_teams.py
measures it). An idle decode thread ends too (another engine of the process decodes at full
speed meanwhile) and the next request starts one. On the real bundled model, with 2
threads so that teams exist."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest

from tests.conftest import chat
from tokenpipe.engines.base import EngineOptions
from tokenpipe.types import EngineText

pytestmark = pytest.mark.model
lc = pytest.importorskip("llama_cpp") if not os.environ.get("CI") else __import__("llama_cpp")


def native_threads() -> int:
    """The process's threads that Python did not start (OpenMP's workers among them)."""
    return len(os.listdir("/proc/self/task")) - threading.active_count()


def settled(expected: int) -> int:
    """native_threads() once it is down to `expected` (ending threads take a moment to
    leave /proc), or after 5 s."""
    deadline = time.monotonic() + 5
    while native_threads() > expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return native_threads()


def test_decodes_on_the_decode_thread_and_embedding_threads_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenpipe.engines.llamacpp import LlamaCppEngine, decode_thread

    callers: list[threading.Thread] = []
    real = lc.llama_decode

    def decode(ctx: Any, batch: Any) -> int:
        callers.append(threading.current_thread())
        return int(real(ctx, batch))

    monkeypatch.setattr(lc, "llama_decode", decode)
    monkeypatch.setattr(decode_thread, "PARK_AFTER_S", 0.3)
    engine = LlamaCppEngine(EngineOptions(context_size=2048, parallel=2, threads=2))

    async def scenario() -> None:
        await engine.load()
        decoder = engine._thread
        assert decoder is not None and callers, "the load-time check decodes (exact mode)"
        request = chat("Name three colours.", max_tokens=8, temperature=0)
        texts = [e.text async for e in engine.stream(engine.prepare(request, 8))
                 if isinstance(e, EngineText)]
        assert texts and set(callers) == {decoder}
        answered = len(callers)
        before = native_threads()
        for _ in range(2):
            embedded = await engine.embed(["a short input", "another one"])
            assert len(embedded.vectors) == 2
        embedders = set(callers[answered:])
        assert len(embedders) == 2 and decoder not in embedders, "a thread each request"
        # the embedding threads end (a moment after handing their result over; the idle
        # decode thread may park meanwhile, so the count alone does not show it), and
        # their OpenMP workers with them
        await asyncio.to_thread(lambda: [t.join(10) for t in embedders])
        assert not any(t.is_alive() for t in embedders)
        assert await asyncio.to_thread(settled, before) <= before
        # idle, the decode thread ends, and its OpenMP worker with it
        await asyncio.to_thread(decoder.join, 10)
        assert not decoder.is_alive() and engine.healthy()
        assert await asyncio.to_thread(settled, before - 1) <= before - 1
        again = [e.text async for e in engine.stream(engine.prepare(request, 8))
                 if isinstance(e, EngineText)]
        assert again == texts
        assert engine._thread is not decoder and callers[-1] is engine._thread
        await engine.aclose()

    asyncio.run(scenario())
