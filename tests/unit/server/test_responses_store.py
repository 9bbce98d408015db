"""The stores of responses, one contract over both: the SQLite file and Redis (`--state`,
a real redis-server on a free port). Rows survive a new store on the same file or Redis,
are bounded by count, bytes (oldest first) and age; a background response's record gives
way to its row, and one deleted while it runs is not stored. SQLite alone: nothing is
created before the first use and every statement runs off the event loop."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenpipe.server.responses.store import ResponseStore, SqliteResponseStore, Stored

Make = Callable[..., ResponseStore]


def row(n: int, created: float | None = None) -> Stored:
    return Stored(f"resp_{n}", time.time() if created is None else created,
                  {"id": f"resp_{n}", "output": [{"text": "日本 🎉"}]}, [{"id": "msg_1"}],
                  [["user", "hi"], ["assistant", str(n)]], {"deltas": ["a"]} if n else None)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    from tests.conftest import running
    from tests.e2e.redis_server import RedisServer

    with running(RedisServer()) as server:
        yield server.url


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.e2e)])
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    """make(**limits) -> a store; called again, a new store on the same file or keys
    (`reopened`: the one the test closed)."""
    made: list[ResponseStore] = []
    prefix = f"test-{secrets.token_hex(4)}"
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""

    def new(reopened: ResponseStore | None = None, **limits: Any) -> ResponseStore:
        if reopened is not None:  # closed by the test
            made.remove(reopened)
        limits = {"max_age_s": 3600, "max_count": 10, **limits}
        store: ResponseStore
        if request.param == "sqlite":
            store = SqliteResponseStore(str(tmp_path / "sub" / "r.sqlite3"), **limits)
        else:
            from tokenpipe.server.state.responses_store import RedisResponseStore

            store = RedisResponseStore(url, prefix, **limits)
        made.append(store)
        return store

    yield new
    for store in made:
        await store.aclose()


async def test_rows_survive_a_new_store(make: Make) -> None:
    store = make()
    first = row(1)
    assert await store.put(row(0)) and await store.put(first)
    await store.aclose()
    again = make(reopened=store)
    assert await again.get("resp_1") == first
    got = await again.get("resp_0")
    assert got is not None and got.stream is None and got.response["output"][0]["text"] == (
        "日本 🎉")
    assert await again.delete("resp_0") and not await again.delete("resp_0")
    assert await again.get("resp_0") is None and await again.get("nope") is None


async def test_bounded_by_count_and_age(make: Make) -> None:
    store = make(max_age_s=60, max_count=3)
    now = time.time()
    for n in range(5):
        await store.put(row(n, now + n))
    assert [n for n in range(5) if await store.get(f"resp_{n}")] == [2, 3, 4]
    await store.put(row(9, now - 120))  # older than max_age_s: never served
    assert await store.get("resp_9") is None


async def test_bounded_by_bytes_oldest_first(make: Make) -> None:
    size = sum(len(t.encode()) for t in row(1).texts() if t is not None)
    store = make(max_count=100, max_bytes=size * 4 + size // 2)
    now = time.time()
    for n in range(1, 10):
        await store.put(row(n, now))  # one second: the order they were stored in counts
    assert [n for n in range(1, 10) if await store.get(f"resp_{n}")] == [6, 7, 8, 9]


async def test_a_background_record_gives_way_to_its_row(make: Make) -> None:
    """A record while it runs (shared stores only: one replica's keeps none), its row in
    its place once stored; deleted while it ran: not stored."""
    store = make()
    shared = isinstance(store, SqliteResponseStore) is False
    record = {"token": "t" * 32, "input_items": [{"id": "msg_1"}]}
    await store.announce("resp_1", record)
    assert await store.announced("resp_1") == (record if shared else None)
    assert await store.put(row(1))
    assert await store.announced("resp_1") is None and await store.get("resp_1") is not None
    await store.announce("resp_2", record)
    assert await store.delete("resp_2") is shared  # a running one: found, marked deleted
    assert await store.announced("resp_2") is None
    assert await store.put(row(2)) is not shared  # not stored where it was deleted
    assert (await store.get("resp_2") is None) is shared
    await store.retire("resp_2")


async def test_sqlite_opens_its_file_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "r.sqlite3"
    store = SqliteResponseStore(str(path), max_age_s=3600, max_count=10)
    assert not path.parent.exists()
    await store.put(row(1))
    assert path.exists()
    await store.aclose()


async def test_sqlite_runs_every_statement_off_the_event_loop(tmp_path: Path) -> None:
    store = SqliteResponseStore(str(tmp_path / "r.sqlite3"), max_age_s=60, max_count=3)
    seen: list[str] = []
    original = store._conn  # the connection is only ever touched in the worker thread

    def conn():  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        return original()

    store._conn = conn  # type: ignore[method-assign]
    await store.put(row(1))
    await store.get("resp_1")
    await store.aclose()
    assert seen and all(name.startswith("responses-db") for name in seen)


@pytest.mark.e2e
async def test_a_running_response_s_record_lives_as_long_as_its_replica(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Renewed while it runs, past its expiry; gone within one expiry of its replica
    stopping without a word (as SIGKILL would)."""
    import redis.asyncio as aioredis

    from tokenpipe.server.state import responses_store

    monkeypatch.setattr(responses_store, "RUN_TTL_S", 0.3)
    prefix = f"test-{secrets.token_hex(4)}"
    store = responses_store.RedisResponseStore(redis_url, prefix, max_age_s=60, max_count=10)
    await store.announce("resp_1", {"token": "t" * 32})
    await asyncio.sleep(1.0)  # three of its expiries
    assert await store.announced("resp_1") == {"token": "t" * 32}
    await store.aclose()  # stops renewing; the record stays until it expires
    async with aioredis.from_url(redis_url) as r:
        key = f"{prefix}:resp:run:resp_1"
        deadline = time.monotonic() + 2
        while await r.exists(key):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
