"""Stored Responses shared by replicas (`--state redis://HOST:PORT/DB`): the Responses
door's store (server/responses/store.py, `ResponseStore`) in Redis, so that
`previous_response_id`, GET, input_items and DELETE work on any replica, under the same
limits as the SQLite store.

Keys, under `--state-prefix` (default `tokenpipe`), values JSON (never pickle):
- `P:resp:row:ID`, a hash: `created_at`, `response`, `input_items`, `conversation`,
  `stream` (background only) and `bytes`; it expires `max_age_s` after `created_at`;
- `P:resp:index`, a sorted set of the row ids by when they were stored (Redis's clock,
  microseconds, strictly increasing), `P:resp:sizes` (a hash: id -> bytes) and
  `P:resp:bytes` (their total): the bounded index. Each write drops, oldest first, the
  entries older than `max_age_s`, those beyond `max_count` and those beyond `max_bytes`
  with their rows (one Lua script, so replicas writing at once agree; it names the rows
  it drops itself, so one Redis, not a Redis Cluster); the three keys expire `max_age_s`
  after the last write, when every row has;
- `P:resp:run:ID`, a hash: the record of a background response while it runs
  (`run`: what another replica needs to follow it, runs.py) and, once it was deleted on
  another replica, `deleted`; its replica renews its expiry (RUN_TTL_S) and replaces it
  with the row when it ends, so a replica that died leaves it for RUN_TTL_S at most.

Redis failing: the call is the door's StoreError (500 in its shape), `failure` says why
(/health: degraded); until a probe reaches Redis again (every RETRY_S) calls fail at once,
then the store is in use again by itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ..responses.store import Stored, StoreError, StoreFull, check_size
from .redis_store import _safe

log = logging.getLogger("tokenpipe.responses")
RETRY_S = 1.0  # Redis away: how often the probe tries it again
RUN_TTL_S = 10.0  # a background response's record; renewed every RUN_TTL_S / 3

# KEYS: row, index, sizes, total, run. ARGV: id, row ttl ms, bytes, max count, max bytes,
# max age ms, row key prefix, then the row's fields and values. 0: deleted while it ran
_PUT = """
if redis.call('HEXISTS', KEYS[5], 'deleted') == 1 then
  redis.call('DEL', KEYS[5])
  return 0
end
redis.call('DEL', KEYS[5])
local id, size = ARGV[1], tonumber(ARGV[3])
local max_count, max_bytes, max_age_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local top = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if top[2] and tonumber(top[2]) >= now then now = tonumber(top[2]) + 1 end
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
local function drop(victim)
  local had = redis.call('HGET', KEYS[3], victim)
  if had then total = total - tonumber(had) end
  redis.call('HDEL', KEYS[3], victim)
  redis.call('ZREM', KEYS[2], victim)
  redis.call('DEL', ARGV[7] .. victim)
end
drop(id)  -- a row stored again: its old size goes
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- integers as strings: Lua would print a 16-digit number as 1.7e+15
redis.call('ZADD', KEYS[2], string.format('%.0f', now), id)
redis.call('HSET', KEYS[3], id, size)
total = total + size
local oldest = string.format('(%.0f', now - max_age_ms * 1000)
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', oldest)) do drop(old) end
local over = redis.call('ZCARD', KEYS[2]) - max_count
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do drop(old) end
end
while total > max_bytes do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not first then break end
  drop(first)
end
redis.call('SET', KEYS[4], string.format('%.0f', total))
for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], max_age_ms) end
return 1
"""
# KEYS: row, index, sizes, total, run. ARGV: id. 1: there was a row or a running one
_DELETE = """
local had = redis.call('HGET', KEYS[3], ARGV[1])
if had then
  redis.call('DECRBY', KEYS[4], had)
  redis.call('HDEL', KEYS[3], ARGV[1])
end
redis.call('ZREM', KEYS[2], ARGV[1])
local found = redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[5]) == 1 and redis.call('HSETNX', KEYS[5], 'deleted', '1') == 1 then
  found = 1
end
return found
"""
_FIELDS = ("response", "input_items", "conversation", "stream")


class RedisResponseStore:
    """ResponseStore in Redis (the module's doc); `url` as `--state` takes it."""

    def __init__(self, url: str, prefix: str = "tokenpipe", *, max_age_s: float,
                 max_count: int, max_row_bytes: int = 8 * 2**20,
                 max_bytes: int = 2 * 2**30) -> None:
        self.url, self.prefix = url, prefix
        self.max_age_s = max_age_s
        self.max_count = max_count
        self.max_row_bytes = max_row_bytes
        self.max_bytes = max_bytes
        self.redis = aioredis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
        self._put = self.redis.register_script(_PUT)
        self._delete = self.redis.register_script(_DELETE)
        self.failure: str | None = None  # why the store cannot serve now (/health)
        self._outage: str | None = None  # Redis unreachable: why; the probe runs
        self._announced: set[str] = set()  # background responses running here
        self._tasks: dict[str, asyncio.Task[None]] = {}  # "probe", "renew"

    def _key(self, *parts: str) -> str:
        return ":".join((self.prefix, "resp", *parts))

    def _keys(self, response_id: str) -> list[str]:
        return [self._key("row", response_id), self._key("index"), self._key("sizes"),
                self._key("bytes"), self._key("run", response_id)]

    async def put(self, row: Stored) -> bool:
        try:
            texts = row.texts()
            size = check_size(row, texts, self.max_row_bytes)
        except StoreFull as exc:
            self.failure = f"could not store response {row.id}: StoreFull: {exc}"
            log.error("%s", self.failure)
            raise StoreError(self.failure) from None
        fields: list[str | float] = ["created_at", row.created_at, "bytes", size]
        for name, text in zip(_FIELDS, texts, strict=True):
            if text is not None:
                fields += [name, text]
        ttl_ms = max(1, int((row.created_at + self.max_age_s - time.time()) * 1000))
        args = [row.id, ttl_ms, size, self.max_count, self.max_bytes,
                int(self.max_age_s * 1000), self._key("row", ""), *fields]
        stored = await self._call(f"could not store response {row.id}",
                                  lambda: self._put(keys=self._keys(row.id), args=args))
        self.failure = None
        return bool(stored)

    async def get(self, response_id: str) -> Stored | None:
        found = await self._call("could not read a stored response",
                                 lambda: self.redis.hgetall(self._key("row", response_id)))
        if not found:
            return None
        f = {k.decode(): v for k, v in found.items()}
        created = float(f["created_at"])
        if created < time.time() - self.max_age_s:
            return None
        stream = f.get("stream")
        return Stored(response_id, created, json.loads(f["response"]),
                      json.loads(f["input_items"]), json.loads(f["conversation"]),
                      None if stream is None else json.loads(stream))

    async def delete(self, response_id: str) -> bool:
        found = await self._call("could not delete a stored response", lambda: self._delete(
            keys=self._keys(response_id), args=[response_id]))
        return bool(found)

    async def announce(self, response_id: str, record: dict[str, Any]) -> None:
        key = self._key("run", response_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, "run", json.dumps(record, ensure_ascii=False, separators=(",", ":")))
        pipe.pexpire(key, int(RUN_TTL_S * 1000))
        if await self._quietly("could not announce a background response", pipe.execute):
            self._announced.add(response_id)
            if "renew" not in self._tasks:
                self._spawn("renew", self._renew())

    async def announced(self, response_id: str) -> dict[str, Any] | None:
        found = await self._call("could not read a running response", lambda: self.redis.hgetall(
            self._key("run", response_id)))
        if not found or b"deleted" in found:
            return None
        record: dict[str, Any] = json.loads(found[b"run"])
        return record

    async def retire(self, response_id: str) -> None:
        if response_id in self._announced:
            self._announced.discard(response_id)
            await self._quietly("could not retire a background response",
                                lambda: self.redis.delete(self._key("run", response_id)))

    async def _renew(self) -> None:
        """While background responses run here: their records' expiry pushed on (a
        record that expired in an outage is not written again: it was only for sharing)."""
        while self._announced:
            await asyncio.sleep(RUN_TTL_S / 3)
            pipe = self.redis.pipeline(transaction=False)
            for response_id in self._announced:
                pipe.pexpire(self._key("run", response_id), int(RUN_TTL_S * 1000))
            await self._quietly("could not renew background responses", pipe.execute)
        self._tasks.pop("renew", None)  # now: the next announce starts another

    async def _call(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """A Redis call; StoreError (`failure`: what and why) where Redis is unreachable,
        at once while the probe has not reached it again."""
        if self._outage is None:
            try:
                return await call()
            except (RedisError, OSError) as exc:
                if self._outage is None:  # calls in flight at once fail together: once
                    self._outage = f"state store unreachable: {exc}"
                    log.warning("stored responses: state store %s unreachable: %s",
                                _safe(self.url), exc)
                    self._spawn("probe", self._probe())
        self.failure = f"{what}: {self._outage}"
        raise StoreError(self.failure)

    async def _quietly(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """_call for what costs only the sharing: None where it failed."""
        with contextlib.suppress(StoreError):
            return await self._call(what, call)
        return None

    async def _probe(self) -> None:
        while True:
            await asyncio.sleep(RETRY_S)
            try:
                await self.redis.ping()
            except (RedisError, OSError):
                continue
            log.info("stored responses: state store %s reachable again", _safe(self.url))
            self._outage = self.failure = None
            return

    def _spawn(self, name: str, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._tasks.pop(name, None) if self._tasks.get(
            name) is t else None)

    async def aclose(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()
