"""Where grammars compile: a small pool of threads of their own, never asyncio's default
executor (which tokenizes every long prompt), with a deadline (issue 31).

A request with a format or tools is prepared (its prompt templated, its grammar compiled
and its first mask computed) here. A compile waiting for a thread when its client goes away
is dropped (the asyncio future's cancel reaches the pool's queue); one past the deadline
answers a 400 naming the field at once, and its thread, which cannot be interrupted, ends
the compile with nobody waiting. The pool holds WORKERS threads, so hostile schemas can
slow only one another: prompts without a grammar never wait behind them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..errors import BadRequest, Overloaded
from ..types import GenerationRequest
from .grammars import grammar_param

if TYPE_CHECKING:
    from ..engines.base import Engine, PreparedRequest

T = TypeVar("T")

WORKERS = 2  # grammar compiles at once, per process
MAX_WAITING = 32  # compiles queued behind them before a request is refused as overloaded
DEADLINE_S = 10.0  # a compile (with its prompt's preparation) that takes longer: a 400

def _niced() -> None:
    import os
    import threading
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


_pool = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="tokenpipe-grammar",
                                              initializer=_niced)
_pending = 0


async def prepare(engine: Engine, request: GenerationRequest, max_tokens: int
                  ) -> PreparedRequest:
    """`engine.prepare(request, max_tokens)` in the grammar pool (see run())."""
    return await run(grammar_param(request), engine.prepare, request, max_tokens)


async def run(param: str, fn: Callable[..., T], *args: object,
              deadline_s: float = DEADLINE_S) -> T:
    """`fn(*args)` in the grammar pool; BadRequest naming `param` past `deadline_s`,
    Overloaded when MAX_WAITING compiles are queued already."""
    global _pending
    if _pending >= WORKERS + MAX_WAITING:
        raise Overloaded("too many output formats are compiling; retry shortly")
    _pending += 1  # the event loop's own count: only this coroutine changes it
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(_pool, functools.partial(fn, *args))
    try:
        return await asyncio.wait_for(future, deadline_s)
    except TimeoutError:
        raise BadRequest(f"the output format did not compile within {deadline_s:g} s: "
                         "simplify the schema", param=param) from None
    finally:
        _pending -= 1
