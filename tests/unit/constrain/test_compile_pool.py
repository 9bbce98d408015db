"""The grammar pool (constrain/compile_pool.py): its own threads, a deadline that answers a
400 naming the field, a compile whose client went away dropped before it runs, and a bound
on what may wait."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tokenpipe.constrain import compile_pool
from tokenpipe.errors import BadRequest, Overloaded


async def test_work_runs_in_the_pools_own_threads() -> None:
    name = await compile_pool.run("tools", lambda: threading.current_thread().name)
    assert name.startswith("tokenpipe-grammar")


async def test_past_the_deadline_is_a_400_naming_the_field() -> None:
    started = time.perf_counter()
    with pytest.raises(BadRequest) as caught:
        await compile_pool.run("response_format", time.sleep, 0.5, deadline_s=0.05)
    assert caught.value.param == "response_format"
    assert "did not compile within" in caught.value.message
    assert time.perf_counter() - started < 0.4  # answered at the deadline, not at the end
    await asyncio.sleep(0.5)  # let the thread finish its sleep for the next tests


async def test_a_compile_abandoned_while_it_waits_is_dropped() -> None:
    gate = threading.Event()
    ran: list[int] = []
    busy = [asyncio.create_task(compile_pool.run("tools", gate.wait, 5))
            for _ in range(compile_pool.WORKERS)]  # every thread taken
    await asyncio.sleep(0.05)
    waiting = asyncio.create_task(compile_pool.run("tools", ran.append, 1))
    await asyncio.sleep(0.05)
    waiting.cancel()  # its client went away
    with pytest.raises(asyncio.CancelledError):
        await waiting
    gate.set()
    await asyncio.gather(*busy)
    await compile_pool.run("tools", lambda: None)  # the queue has moved past it
    assert ran == []


async def test_too_many_waiting_compiles_are_refused_as_overloaded() -> None:
    gate = threading.Event()
    queued = [asyncio.create_task(compile_pool.run("tools", gate.wait, 5))
              for _ in range(compile_pool.WORKERS + compile_pool.MAX_WAITING)]
    await asyncio.sleep(0.05)
    try:
        with pytest.raises(Overloaded):
            await compile_pool.run("tools", lambda: None)
    finally:
        gate.set()
        await asyncio.gather(*queued)
