"""Which threads call llama_decode, and why that matters for its speed.

llama-cpp-python's llama.cpp is built with OpenMP: a graph's ops run on an OpenMP team,
and each thread that calls llama_decode gets a team of its own (itself and n_threads - 1
workers), kept until that thread ends. libgomp counts the threads of every team in the
process; once they outnumber the cores, every team's barriers spin 100 times instead of
300,000 before they sleep on a futex, and a step (hundreds of barriers) pays a wake-up at
each. Measured on the 2-core build machine (the bundled model, 2 threads, one sequence,
`scripts/omp_teams.py`): 180 tokens/s decoding on the only team, about 100 once a second
thread had decoded once and lived on.

So an engine calls llama_decode from one long-lived thread, its decode thread (which also
loads the model and runs the load-time check), and anything else that decodes (embeddings)
runs on a thread that ends with its work (OwnThreads).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class OwnThreads:
    """Runs calls each on a thread of its own that ends when the call returns (its OpenMP
    team with it), one call at a time, in the order they came; close() waits for them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._turn = threading.Lock()  # the calls share state that is not thread-safe
        self._live: set[threading.Thread] = set()

    async def run(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, error: BaseException | None) -> None:
            if done.cancelled():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)  # type: ignore[arg-type]

        def body() -> None:
            result: T | None = None
            error: BaseException | None = None
            try:
                with self._turn:
                    result = fn()
            except BaseException as exc:  # handed to the caller
                error = exc
            finally:
                self._live.discard(threading.current_thread())
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:  # the loop has closed: nobody waits any more
                pass

        thread = threading.Thread(target=body, name=self._name, daemon=True)
        self._live.add(thread)
        thread.start()
        return await done

    def close(self, timeout: float | None = None) -> None:
        """Waits for the calls started (blocking: run it off the event loop)."""
        for thread in list(self._live):
            thread.join(timeout)
