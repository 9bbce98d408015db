"""The SQLite store of responses: rows survive a new store on the same file, are bounded
by count and by age, and nothing is created before the first use."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tokenpipe.server.responses.store import ResponseStore, Stored


def row(n: int, created: float | None = None) -> Stored:
    return Stored(f"resp_{n}", time.time() if created is None else created,
                  {"id": f"resp_{n}", "output": [{"text": "日本 🎉"}]}, [{"id": "msg_1"}],
                  [["user", "hi"], ["assistant", str(n)]], {"deltas": ["a"]} if n else None)


async def test_rows_survive_a_new_store_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "r.sqlite3"
    store = ResponseStore(str(path), max_age_s=3600, max_count=10)
    assert not path.parent.exists()  # opened on first use only
    first = row(1)
    await store.put(row(0))
    await store.put(first)
    await store.aclose()
    again = ResponseStore(str(path), max_age_s=3600, max_count=10)
    assert await again.get("resp_1") == first
    got = await again.get("resp_0")
    assert got is not None and got.stream is None and got.response["output"][0]["text"] == (
        "日本 🎉")
    assert await again.delete("resp_0") and not await again.delete("resp_0")
    assert await again.get("resp_0") is None and await again.get("nope") is None
    await again.aclose()


async def test_bounded_by_count_and_age(tmp_path: Path) -> None:
    store = ResponseStore(str(tmp_path / "r.sqlite3"), max_age_s=60, max_count=3)
    now = time.time()
    for n in range(5):
        await store.put(row(n, now + n))
    assert [n for n in range(5) if await store.get(f"resp_{n}")] == [2, 3, 4]
    await store.put(row(9, now - 120))  # older than max_age_s: never served
    assert await store.get("resp_9") is None
    await store.aclose()


async def test_every_statement_runs_off_the_event_loop(tmp_path: Path) -> None:
    store = ResponseStore(str(tmp_path / "r.sqlite3"), max_age_s=60, max_count=3)
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
