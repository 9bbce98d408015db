"""Stored responses: `ResponseStore`, the interface the Responses door uses, and
`SqliteResponseStore`, one SQLite file (stdlib sqlite3), so a restart loses no stored
answer. With `--state redis://...` the replicas share theirs in Redis instead
(server/state/responses_store.py), under the same limits.

One worker thread owns the connection and runs every statement (nothing touches the disk
on the event loop; one writer, so no locking between threads). The file is opened on first
use: a server that never stores anything creates nothing. Bounded: rows older than
`max_age_s` are forgotten (and never served), and beyond `max_count` rows or `max_bytes`
bytes the oldest go, checked as each row is written; a row over `max_row_bytes` is refused
(the door checks the request's part before it runs: `row_bytes`).

The connection holds the file in EXCLUSIVE locking mode: WAL then keeps its index in heap
memory, not in a mapped `-shm` file, so another process truncating that file cannot turn
a read into SIGBUS (other processes cannot open the file while the server runs)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ...errors import TokenpipeError
from ...types import Message, ToolCall

log = logging.getLogger("tokenpipe.responses")
T = TypeVar("T")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    response TEXT NOT NULL,      -- the response object, as GET answers it
    input_items TEXT NOT NULL,   -- this request's input items, as input_items lists them
    conversation TEXT NOT NULL,  -- [[role, text], ...]: what previous_response_id continues
    stream TEXT,                 -- background only: {"message_id", "deltas"} to replay
    bytes INTEGER NOT NULL DEFAULT 0  -- the row's text, UTF-8: what max_bytes counts
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created_at);
"""


@dataclass(frozen=True)
class Stored:
    id: str
    created_at: float
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    conversation: list[list[Any]]  # turn(): [role, text] and, with tools, a third
    stream: dict[str, Any] | None = None

    def texts(self) -> tuple[str, str, str, str | None]:
        """The row's parts as the store keeps them (JSON): response, input items,
        conversation and (background only) stream."""
        return (_dump(self.response), _dump(self.input_items), _dump(self.conversation),
                None if self.stream is None else _dump(self.stream))


@dataclass
class Pending:
    """What a response stores besides itself: its input items and the conversation before
    its answer (previous conversation, then this input)."""

    input_items: list[dict[str, Any]]
    conversation: list[list[Any]]

    def stored(self, final: dict[str, Any], text: str,
               stream: dict[str, Any] | None = None) -> Stored:
        calls = tuple(ToolCall(i["call_id"], i["name"], i["arguments"])
                      for i in final.get("output") or () if i.get("type") == "function_call")
        answer = turn(Message("assistant", text, calls))
        return Stored(final["id"], float(final["created_at"]), final, self.input_items,
                      [*self.conversation, answer], stream)


def turn(m: Message) -> list[Any]:
    """A chat turn as the store keeps it: [role, text], and a turn's calls or the call it
    answers as a third element."""
    if m.tool_calls:
        return [m.role, m.content, {"tool_calls": [[c.id, c.name, c.arguments]
                                                   for c in m.tool_calls]}]
    if m.tool_call_id is not None:
        return [m.role, m.content, {"tool_call_id": m.tool_call_id}]
    return [m.role, m.content]


def message_of(entry: list[Any]) -> Message:
    """A stored turn back as a chat turn."""
    role, text, *rest = entry
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"a stored conversation holds role {role!r}")
    extra = rest[0] if rest else {}
    calls = tuple(ToolCall(*c) for c in extra.get("tool_calls", ()))
    return Message(role, text, calls, extra.get("tool_call_id"))


class StoreError(TokenpipeError):
    """The store could not write a response (a 500 in the door's shape; /health says why)."""


class StoreFull(ValueError):
    """A row over max_row_bytes: never stored."""


class ResponseStore(Protocol):
    """Where the Responses door keeps its responses. Bounded as the settings say: rows
    older than `max_age_s` are never served, beyond `max_count` rows or `max_bytes` the
    oldest go, a row over `max_row_bytes` is refused (StoreError). `failure` is why the
    store cannot serve now (/health says it); None when it can.

    A background response running here is announced while it runs (a record: what
    another replica needs to follow it, JSON), so a store shared by replicas lets them
    find it; a store of one replica keeps no record."""

    max_row_bytes: int
    failure: str | None

    async def put(self, row: Stored) -> bool:
        """Stores `row`, in place of its announcement; False where the response was
        deleted (on another replica) while it ran: not stored. StoreError where it cannot
        be stored (the reason kept in `failure`)."""
        ...

    async def get(self, response_id: str) -> Stored | None: ...

    async def delete(self, response_id: str) -> bool:
        """Forgets a response, stored or announced; whether there was one."""
        ...

    async def announce(self, response_id: str, record: dict[str, Any]) -> None:
        """A background response runs here: its record, for as long as it runs (put or
        retire ends it). Never raises: a record that cannot be written costs only the
        sharing."""

    async def announced(self, response_id: str) -> dict[str, Any] | None:
        """The record of a background response running on a replica, None where none
        does (or it was deleted)."""

    async def retire(self, response_id: str) -> None:
        """The background response ended here; its record goes, whether it was stored
        or not."""

    async def aclose(self) -> None: ...


class SqliteResponseStore:
    """The responses of one replica in one SQLite file (the module's doc)."""

    def __init__(self, path: str, *, max_age_s: float, max_count: int,
                 max_row_bytes: int = 8 * 2**20, max_bytes: int = 2 * 2**30) -> None:
        self.path = path
        self.max_age_s = max_age_s
        self.max_count = max_count
        self.max_row_bytes = max_row_bytes
        self.max_bytes = max_bytes
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="responses-db")
        self._db: sqlite3.Connection | None = None
        self.failure: str | None = None  # the last write's failure; a good write clears it

    async def put(self, row: Stored) -> bool:
        """Stores `row`; StoreError (the reason kept in `failure`) where it cannot."""
        try:
            await self._run(self._put, row)
        except (sqlite3.Error, OSError, StoreFull) as exc:
            self.failure = f"could not store response {row.id}: {type(exc).__name__}: {exc}"
            log.error("%s", self.failure)
            raise StoreError(self.failure) from None
        self.failure = None
        return True

    async def get(self, response_id: str) -> Stored | None:
        return await self._run(self._get, response_id)

    async def delete(self, response_id: str) -> bool:
        return await self._run(self._delete, response_id)

    async def announce(self, response_id: str, record: dict[str, Any]) -> None:
        return None  # one replica's store: its runs are found in its own memory

    async def announced(self, response_id: str) -> dict[str, Any] | None:
        return None

    async def retire(self, response_id: str) -> None:
        return None

    async def aclose(self) -> None:
        await self._run(self._close)
        self._pool.shutdown(wait=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # ---- in the worker thread -----------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            if self.path != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            db = sqlite3.connect(self.path, timeout=10.0)
            # before WAL: its index in heap memory, no -shm mapping (see the module's doc)
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: a crash loses no committed row
            db.executescript(_SCHEMA)
            columns = {c[1] for c in db.execute("PRAGMA table_info(responses)")}
            if "bytes" not in columns:  # a file from before the byte cap: its rows count 0
                db.execute("ALTER TABLE responses ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")
            self._db = db
            log.info("stored responses: %s", self.path)
        return self._db

    def _put(self, row: Stored) -> None:
        texts = row.texts()
        size = check_size(row, texts, self.max_row_bytes)
        db = self._conn()
        with db:
            db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (row.id, row.created_at, *texts, size))
            db.execute("DELETE FROM responses WHERE created_at < ?", (self._oldest(),))
            db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY "
                       "created_at DESC, rowid DESC LIMIT -1 OFFSET ?)", (self.max_count,))
            # the newest rows whose running total fits max_bytes stay; the older ones go
            # (created_at is in whole seconds: rowid orders the rows of one second)
            db.execute("DELETE FROM responses WHERE id IN (SELECT id FROM (SELECT id, "
                       "SUM(bytes) OVER (ORDER BY created_at DESC, rowid DESC) AS total FROM "
                       "responses) WHERE total > ?)", (self.max_bytes,))

    def _get(self, response_id: str) -> Stored | None:
        found = self._conn().execute(
            "SELECT id, created_at, response, input_items, conversation, stream FROM "
            "responses WHERE id = ? AND created_at >= ?", (response_id, self._oldest()),
        ).fetchone()
        if found is None:
            return None
        rid, created, response, items, conversation, stream = found
        return Stored(rid, created, json.loads(response), json.loads(items),
                      json.loads(conversation), None if stream is None else json.loads(stream))

    def _delete(self, response_id: str) -> bool:
        db = self._conn()
        with db:
            return db.execute("DELETE FROM responses WHERE id = ?",
                              (response_id,)).rowcount > 0

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _oldest(self) -> float:
        return time.time() - self.max_age_s


def check_size(row: Stored, texts: tuple[str | None, ...], max_row_bytes: int) -> int:
    """The row's size in the store (its texts, UTF-8); StoreFull over `max_row_bytes`."""
    size = sum(len(t.encode()) for t in texts if t is not None)
    if size > max_row_bytes:
        raise StoreFull(f"response {row.id} is {size} bytes, over the store's "
                        f"{max_row_bytes} per response")
    return size


def row_bytes(*parts: Any) -> int:
    """What these parts of a row take in the store (UTF-8 JSON)."""
    return sum(len(_dump(p).encode()) for p in parts)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
