"""How every streaming door races its stream against the client's leaving: the coroutines
run as tasks until the first ends, the others are cancelled (so a generation whose client
left is cancelled at once). STYLE.md item 6: never poll is_disconnected()."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from starlette.types import Receive
from starlette.websockets import WebSocketDisconnect


async def race(*coros: Coroutine[Any, Any, object]) -> None:
    """Runs the coroutines until the first ends; cancels the rest; re-raises its error
    unless that is the client going away."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        exc = None if task.cancelled() else task.exception()
        if exc is not None and not isinstance(exc, WebSocketDisconnect | ConnectionError):
            raise exc


async def http_disconnect(receive: Receive) -> None:
    """Returns when the HTTP client has gone (its request body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
