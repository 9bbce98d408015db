"""Every llama_decode of the llama.cpp engine runs on its decode thread (the load-time check's
too), or, for embeddings, on a thread that has ended, with its OpenMP workers, by the time
the request is answered: a thread that decoded and lived on keeps an OpenMP team that slows
every later decode of the process (engines/llamacpp/compute.py; scripts/omp_teams.py
measures it). On the real bundled model, with 2 threads so that teams exist."""

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


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def settled_threads(before: int) -> int:
    """The process's thread count once it is back to `before` (ending threads take a
    moment to leave /proc), or after 5 s."""
    deadline = time.monotonic() + 5
    while os_threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    return os_threads()


def test_decodes_on_the_decode_thread_and_embedding_threads_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenpipe.engines.llamacpp import LlamaCppEngine

    callers: list[threading.Thread] = []
    real = lc.llama_decode

    def decode(ctx: Any, batch: Any) -> int:
        callers.append(threading.current_thread())
        return int(real(ctx, batch))

    monkeypatch.setattr(lc, "llama_decode", decode)
    engine = LlamaCppEngine(EngineOptions(context_size=2048, parallel=2, threads=2))

    async def scenario() -> tuple[int, int, int]:
        await engine.load()
        loaded = len(callers)
        request = chat("Name three colours.", max_tokens=8, temperature=0)
        texts = [e async for e in engine.stream(engine.prepare(request, 8))
                 if isinstance(e, EngineText)]
        assert texts
        answered = len(callers)
        before = await asyncio.to_thread(os_threads)  # the executor's thread counted too
        for _ in range(2):
            embedded = await engine.embed(["a short input", "another one"])
            assert len(embedded.vectors) == 2
        after = await asyncio.to_thread(settled_threads, before)
        await engine.aclose()
        return loaded, answered, after - before

    loaded, answered, grew = asyncio.run(scenario())
    decode_thread = engine._thread
    assert loaded > 0, "the load-time check decodes (exact mode)"
    assert set(callers[:answered]) == {decode_thread}
    embedders = set(callers[answered:])
    assert embedders and decode_thread not in embedders
    assert len(embedders) == 2, "a thread each request"
    assert not any(t.is_alive() for t in embedders)
    assert grew == 0, "the embedding threads' OpenMP workers ended with them"
