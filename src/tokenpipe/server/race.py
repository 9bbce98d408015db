"""How every streaming door races its stream against the client's leaving: the first of
the coroutines to end cancels the others (so a generation whose client left is cancelled at
once). STYLE.md item 6: never poll is_disconnected().

The first coroutine runs in the caller's own task, the others beside it as tasks: per
request that is one task and a loop turn fewer than a task each (the SSE door's share of
the hop's CPU, docs/deployment.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from starlette.types import Receive
from starlette.websockets import WebSocketDisconnect

_CLIENT_GONE = (WebSocketDisconnect, ConnectionError)


async def race(main: Coroutine[Any, Any, object], *others: Coroutine[Any, Any, object],
               settle: bool = True) -> None:
    """Runs the coroutines until the first ends; cancels the rest, and (`settle`) waits
    until they have ended; re-raises the first one's error unless that is the client
    going away."""
    current = asyncio.current_task()
    assert current is not None
    tasks = [asyncio.ensure_future(c) for c in others]
    first: list[asyncio.Task[object]] = []

    def ended(task: asyncio.Task[object]) -> None:
        if not first:
            first.append(task)
            current.cancel()

    for task in tasks:
        task.add_done_callback(ended)
    try:
        await main
    except asyncio.CancelledError:
        if not first or current.uncancel() > 0:
            raise  # cancelled from outside, not by one of the others ending
    except _CLIENT_GONE:
        pass
    else:
        if first:  # main swallowed the cancel: this task is not being cancelled any more
            current.uncancel()
    finally:
        for task in tasks:
            task.remove_done_callback(ended)
            task.cancel()
    if settle and not all(t.done() for t in tasks):
        await asyncio.wait(tasks)
    exc = None if not first or first[0].cancelled() else first[0].exception()
    if exc is not None and not isinstance(exc, _CLIENT_GONE):
        raise exc


async def http_disconnect(receive: Receive) -> None:
    """Returns when the HTTP client has gone (its request body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
