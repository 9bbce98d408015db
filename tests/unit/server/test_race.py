"""race() (server/race.py) alone: the first coroutine to end cancels the others, a client
going away is no error, a cancel from outside is not swallowed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tokenpipe.server.race import http_disconnect, race


async def test_the_main_coroutine_ending_cancels_the_others() -> None:
    cancelled: list[str] = []

    async def other() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append("other")
            raise

    async def main() -> str:
        await asyncio.sleep(0)
        return "done"

    await race(main(), other())
    assert cancelled == ["other"]  # settle: waited until it had ended


async def test_another_ending_first_cancels_the_main_one_at_once() -> None:
    seen: list[str] = []
    gone = asyncio.Event()

    async def main() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("main cancelled")
            raise

    async def client_leaves() -> None:
        await gone.wait()

    loop = asyncio.get_running_loop()
    loop.call_later(0.01, gone.set)
    started = loop.time()
    await race(main(), client_leaves())  # returns: the cancel was race's own
    assert seen == ["main cancelled"] and loop.time() - started < 5
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # no cancel left pending on us


async def test_the_first_ones_error_is_raised_unless_the_client_went_away() -> None:
    async def wait() -> None:
        await asyncio.sleep(60)

    async def broken() -> None:
        raise RuntimeError("bug")

    async def gone() -> None:
        raise ConnectionResetError

    with pytest.raises(RuntimeError, match="bug"):
        await race(wait(), broken())
    await race(wait(), gone())  # a client that went away ends the race quietly

    async def main_gone() -> None:
        raise ConnectionResetError

    await race(main_gone(), wait())


async def test_a_cancel_from_outside_propagates() -> None:
    others_cancelled = asyncio.Event()

    async def other() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            others_cancelled.set()

    task = asyncio.ensure_future(race(asyncio.sleep(60), other()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(others_cancelled.wait(), 1)


async def test_without_settle_the_others_are_cancelled_but_not_awaited() -> None:
    ended = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # a cleanup that takes a while
            ended.set()
            raise

    async def main() -> None:
        await asyncio.sleep(0)

    await race(main(), slow_to_stop(), settle=False)
    assert not ended.is_set()  # race returned before the other finished stopping
    await asyncio.wait_for(ended.wait(), 1)


async def test_http_disconnect_reads_until_the_client_has_gone() -> None:
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for message in ({"type": "http.request", "body": b"", "more_body": False},
                    {"type": "http.disconnect"}):
        messages.put_nowait(message)
    await asyncio.wait_for(http_disconnect(messages.get), 1)
    assert messages.empty()
