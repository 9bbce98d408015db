"""The resume store shared by replicas (`--state redis://HOST:PORT/DB`): every resumable
stream this replica produces is logged in Redis as it is read, so a client that reconnects
to any replica resumes it from its last seq, nothing lost and nothing repeated; and a
stream whose replica died is taken over by the replica its client resumes on.

Keys, under `--state-prefix` (default `tokenpipe`), per stream token:
- `P:TOKEN:log`, a Redis Stream: one entry per batch of session events as the producing
  session sealed them (server/state/codec.py: deltas with their token ids, where the
  engine gives them) and its completion tokens so far; the first entry once the prompt's
  token ids are known holds them too;
- `P:TOKEN:meta`, a hash (meta.py): what a replica renders a resume with, and the
  request a take-over runs again;
- `P:TOKEN:lease`, the producing replica's id and address (`ID@HOST:PORT`), with a short
  expiry it renews: only the holder appends to the log (a Lua check-and-append), and a
  follower that finds it lapsed before the final event, or its holder's address refusing
  connections, takes the stream over (follower.py);
- `P:TOKEN:reader`, set by a replica whose client reads the stream there: the producing
  replica then does not cancel it when its own reader's grace period ends;
- `P:TOKEN:cancel`, set by a replica whose client cancels it there: the producer cancels.
All of them expire: the log and meta a grace period after the last event, so no key
outlives its stream by more than that.

Elsewhere a stream is replayed into a local session (GenerationSession.replay), whose
cursors every door reads as it reads a local one: the doors do not know which it is; and
it is taken over there when its producer stopped (follower.py)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import secrets
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ...errors import ShuttingDown
from ...session import (
    Cursor,
    Delta,
    Failed,
    Finished,
    GenerationSession,
    Progress,
    Queued,
    Started,
)
from ...types import GenerationRequest
from ..resumable import Held, LocalResumeStore
from . import codec
from .follower import Follower
from .meta import meta_of, origin_of

log = logging.getLogger("tokenpipe.state")
RETRY_S = 1.0  # Redis away: how often the probe tries it again
CALL_TIMEOUT_S = 1.5  # a Redis call not answered by then counts as Redis away
LOOKUP_TIMEOUT_S = 5.0  # ... except a resuming client's look-up: it holds no stream back
APPEND_PATIENCE_S = 5.0  # ... and a batch for a stream's log (its readers go on meanwhile)
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")  # what secrets.token_urlsafe makes
Start = Callable[[GenerationRequest, str], Awaitable[GenerationSession]]

# KEYS: lease, log, meta; ARGV: replica, events, tokens, ttl ms, the prompt's token ids
# ('' where logged already or unknown). 1: appended, 0: not ours
_APPEND = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[5] == '' then redis.call('XADD', KEYS[2], '*', 'e', ARGV[2], 'n', ARGV[3])
else redis.call('XADD', KEYS[2], '*', 'e', ARGV[2], 'n', ARGV[3], 'p', ARGV[5]) end
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return 1
"""
# KEYS: lease, log, meta, cancel; ARGV: replica, lease ms, ttl ms. -1: not ours, else
# whether a cancel was asked for
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return redis.call('EXISTS', KEYS[4])
"""


class RedisResumeStore(LocalResumeStore):
    """LocalResumeStore whose streams are logged in Redis, and found there when another
    replica produced them (ResumeStore). `start` runs a request here (the one start,
    ModelRegistry.start): set by the runtime, a take-over needs it."""

    call_timeout_s = CALL_TIMEOUT_S

    def __init__(self, grace_s: float, url: str, prefix: str = "tokenpipe",
                 lease_s: float = 3.0, address: str | None = None) -> None:
        super().__init__(grace_s)
        self.url, self.prefix = url, prefix
        self.lease_s = lease_s  # the producer's lease, renewed every third of it
        self.redis = aioredis.from_url(url, socket_connect_timeout=2, socket_timeout=None)
        self._append = self.redis.register_script(_APPEND)
        self._renew = self.redis.register_script(_RENEW)
        # this process, as leases name it; `address`: where other replicas reach it
        # (HOST:PORT), for a follower to see at once that it stopped (follower.py)
        self.replica = secrets.token_hex(6) + (f"@{address}" if address else "")
        self.start: Start | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}  # by "what:token"
        self._replayed: set[str] = set()  # the tokens whose session replays another's log
        self._replays: weakref.WeakSet[GenerationSession] = weakref.WeakSet()
        self.failure: str | None = None  # why Redis is out of use now; None: in use
        self._abandoned: set[str] = set()  # streams whose log lost a batch (Redis away)
        self._opened: set[str] = set()  # streams produced here whose log is open
        self.draining = False
        # counters (Metrics.add_state replaces them with Prometheus ones)
        self.outages: Any = _Count()
        self.takeovers: Any = _Count()

    def _key(self, token: str, what: str) -> str:
        return f"{self.prefix}:{token}:{what}"

    def _ttl_ms(self, live: bool) -> int:
        return int((self.grace_s + (self.lease_s * 4 if live else 0)) * 1000)

    # ---- the producing replica ------------------------------------------------------------
    def keep(self, held: Held) -> None:
        super().keep(held)
        token = held.session.stream_token
        assert token is not None
        if held.session not in self._replays and f"mirror:{token}" not in self._tasks:
            held.session.logged = 0  # its readers get what the log has (the mirror's gate)
            self._spawn(f"mirror:{token}", self._mirror(held))

    async def _mirror(self, held: Held, after: int = -1, taken: bool = False) -> None:
        """Logs the session's events in Redis as they are sealed (a follower's cursor:
        what it takes, every reader gets with the same seq), holding the lease; `taken`:
        a stream this replica took over, logged from after seq `after` (its log and meta
        are there, its lease held). The session's readers get each batch once it is logged
        (GenerationSession.logged): no client ever has a delta another replica could not
        replay; a stream that stops being logged is let go to them at once."""
        session = held.session
        token = session.stream_token
        assert token is not None
        cursor = session.cursor(after, progress=not taken, gated=False)
        keys = [self._key(token, "lease"), self._key(token, "log"), self._key(token, "meta")]
        lease: asyncio.Task[None] | None = None
        prompted = taken  # the prompt's token ids are in the log (an entry's `p`)
        try:
            while not cursor.finished:
                events = [e for e in await cursor.next(merge=False) if not isinstance(
                    e, Queued) and not (taken and isinstance(e, Started | Progress))]
                handed = bool(events) and isinstance(events[-1], Failed) and self.hands_over(
                    session)
                if handed:
                    events.pop()  # not the stream's end: another replica goes on with it
                if not events:
                    if handed:
                        return
                    continue
                batch = "[" + ",".join(map(codec.encode, events)) + "]"
                prompt = ""
                if not prompted and session.prompt_ids is not None:
                    prompt, prompted = json.dumps(session.prompt_ids), True
                args: list[str | int] = [self.replica, batch, session.completion_tokens,
                                         self._ttl_ms(live=not cursor.finished), prompt]
                if lease is None and not taken:  # lease, meta and first batch: one trip
                    done = await self._open_log(held, keys, args)
                else:
                    done = await self._append_patiently(session, keys, args)
                if lease is None:
                    lease = asyncio.create_task(self._hold_lease(token, session))
                if done is None:  # a batch missing from the log: this replica's alone now
                    self._abandoned.add(token)  # (the probe deletes its keys)
                    return
                if done == 0:
                    log.warning("stream %s… was taken over by another replica; no longer "
                                "logged from here", token[:6])
                    return
                if handed:
                    return
                seqs = [e.seq for e in events if isinstance(e, Delta)]
                session.log_reached(seqs[-1] + 1 if seqs else session.logged,
                                    isinstance(events[-1], Finished | Failed))
        finally:
            cursor.close()
            if not session.final_logged:  # not shared any more: its readers go on without
                session.log_reached(None)
            if lease is not None:
                lease.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lease
                if session.final is not None and token not in self._abandoned:
                    # at its end, or handed over: a follower need not wait for the expiry
                    await self._safely(lambda: self._release(token), "releasing a lease")

    async def _append_patiently(self, session: GenerationSession, keys: list[str],
                                args: list[str | int]) -> Any:
        """A batch appended to the stream's log. Past the call timeout its readers go on
        without the gate (a stopped Redis holds the stream back no longer), but the batch
        still has APPEND_PATIENCE_S to land: on a loaded machine a late answer is a moment's
        slowness, and the stream keeps its place in the log (once it lands the gate follows
        the log again; a replica that died meanwhile leaves resumes a log that lacks what
        the readers took in that moment). None where it did not land: the stream is this
        replica's alone from then on. A lease renewal or another call that times out still
        marks Redis away at once, and then no further batch is tried."""
        token = session.stream_token or ""
        append = asyncio.ensure_future(self._safely(
            functools.partial(self._append, keys, args), f"logging stream {token[:6]}…",
            timeout_s=APPEND_PATIENCE_S))
        try:
            landed, _ = await asyncio.wait({append}, timeout=self.call_timeout_s)
            if not landed:
                log.info("stream %s…: the log is slow to answer; its readers go on "
                         "meanwhile", token[:6])
                session.log_reached(None)
            return await append
        finally:
            append.cancel()  # the mirror itself was cancelled (a no-op once it is done)

    def hands_over(self, session: GenerationSession) -> bool:
        final, token = session.final, session.stream_token
        return (isinstance(final, Failed) and final.error.code == "shutting_down"
                and session.api != "responses"  # its replica stores it, failed
                and (token in self._opened or token in self._replayed)
                and token not in self._abandoned and self.failure is None)

    def drain(self) -> None:
        """This server shuts down: it takes nothing over any more, and the streams it only
        replays end here now (handed over: their clients resume elsewhere); the streams it
        produces run on for the shutdown grace."""
        self.draining = True
        for token in list(self._replayed):
            self._cancel_task(f"follow:{token}")
            held = self._held.get(token)
            if held is not None:
                held.session.end_with(Failed(ShuttingDown(
                    "this replica shuts down; resume the stream on another"),
                    held.session.usage()))

    async def _open_log(self, held: Held, keys: list[str], args: list[str | int]
                        ) -> int | None:
        """The producer's first write, in one transaction: its lease, the meta and the
        first batch (as _APPEND would write it); 1 when written, None where Redis failed."""
        replica, batch, tokens, ttl_ms, prompt = args
        assert isinstance(ttl_ms, int)
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(keys[0], replica, px=int(self.lease_s * 1000))
        pipe.hset(keys[2], mapping=meta_of(held))
        pipe.xadd(keys[1], {"e": batch, "n": tokens, **({"p": prompt} if prompt else {})})
        pipe.pexpire(keys[1], ttl_ms)
        pipe.pexpire(keys[2], ttl_ms)
        token = held.session.stream_token
        assert token is not None
        if await self._safely(pipe.execute, f"opening the log of {token[:6]}…") is None:
            return None
        self._opened.add(token)
        return 1

    async def _release(self, token: str) -> None:
        lease = self._key(token, "lease")
        if await self.redis.get(lease) == self.replica.encode():
            await self.redis.delete(lease)

    async def _hold_lease(self, token: str, session: GenerationSession) -> None:
        """While the generation runs: the lease renewed, the log's expiry pushed on (a
        queued stream writes nothing for a while), and a cancel sent by a client that reads
        it on another replica carried out."""
        keys = [self._key(token, what) for what in ("lease", "log", "meta", "cancel")]
        while session.final is None:
            await asyncio.sleep(self.lease_s / 3)
            state = await self._safely(lambda: self._renew(keys=keys, args=[
                self.replica, int(self.lease_s * 1000), self._ttl_ms(live=True)]),
                "renewing a lease")
            if state == -1:
                return
            if state == 1:
                log.info("stream %s… cancelled by a client on another replica", token[:6])
                session.cancel()

    def _expire(self, token: str) -> None:
        """The grace period here ended: cancelled unless a client reads it elsewhere."""
        if token in self._replayed:
            self._cancel_task(f"follow:{token}")
            self._replayed.discard(token)
            super()._expire(token)  # a replayed session: only its local copy goes
            return
        self._spawn(f"expire:{token}", self._expire_unless_read(token))

    async def _expire_unless_read(self, token: str) -> None:
        read = await self._safely(lambda: self.redis.exists(self._key(token, "reader")),
                                  "checking a stream's readers")
        if read and token in self._held and self._held[token].reader is None:
            loop = asyncio.get_running_loop()
            self._grace[token] = loop.call_later(self.grace_s, self._expire, token)
            return
        self._opened.discard(token)
        super()._expire(token)

    # ---- a replica a client resumes on ----------------------------------------------------
    async def find(self, token: str, after: int = -1) -> Held | None:
        held = self._held.get(token)
        if held is not None or not _TOKEN.fullmatch(token):
            return held
        meta = await self._safely(lambda: self.redis.hgetall(self._key(token, "meta")),
                                  "looking a stream up", lookup=True)
        if not meta:
            return None
        fields = {k.decode(): v.decode() for k, v in meta.items()}
        session = GenerationSession(None, fields["model"], resumable=True, api=fields["api"])
        session.stream_token = token
        held = Held(session, fields["stream_id"], sse=origin_of(fields))
        follower = Follower(self, held, fields)
        await follower.catch_up(after)
        if token in self._held:  # found by another resume meanwhile
            return self._held[token]
        self._replayed.add(token)
        self._replays.add(session)
        super().keep(held)
        session.bind_cancel(lambda: self._spawn(f"cancel:{token}", self._cancel_there(token)))
        self._spawn(f"follow:{token}", follower.follow())
        return held

    def take_over(self, token: str, after: int, reader: Any, **kwargs: Any) -> Cursor:
        cursor = super().take_over(token, after, reader, **kwargs)
        if token in self._replayed and reader is not None:
            self._spawn(f"reader:{token}", self.mark_read(token))
        return cursor

    async def mark_read(self, token: str) -> None:
        """A client reads the stream here: its producer keeps it past its own grace."""
        await self._safely(lambda: self.redis.set(self._key(token, "reader"), self.replica,
                                                  px=int(self.grace_s * 1000)),
                           "marking a stream read")

    async def _cancel_there(self, token: str) -> None:
        await self._safely(lambda: self.redis.set(self._key(token, "cancel"), self.replica,
                                                  px=int((self.grace_s + self.lease_s) * 1000)),
                           "cancelling a stream on its replica")

    # ---- both ---------------------------------------------------------------------------
    def _spawn(self, name: str, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._tasks.pop(name, None) if self._tasks.get(
            name) is t else None)

    def _cancel_task(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()

    async def _safely(self, call: Callable[[], Awaitable[Any]], what: str,
                      timeout_s: float = CALL_TIMEOUT_S, *, lookup: bool = False) -> Any:
        """A Redis call whose failure costs the shared state, never a stream: None when it
        failed, took over `timeout_s` (a Redis that hangs holds streams back no longer:
        their deltas wait for the log), or when Redis is known to be away (nothing but the
        probe and `lookup`s call it then: a resume asks anyway, a slow moment under load
        is no outage). The first failure is logged, /health says degraded (`failure`)
        until the probe reaches Redis again."""
        if self.failure is not None and not lookup:
            return None
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S if lookup else timeout_s):
                return await call()
        except (RedisError, OSError, TimeoutError) as exc:
            if self.failure is None:  # calls in flight at once fail together: once
                log.warning("state store %s unreachable (%s): %s; streams go on, resumable "
                            "on this replica only until it is back", _safe(self.url), what,
                            exc)
                self.failure = f"state store unreachable: {exc or 'no answer in time'}"
                self.outages.inc()
                self._spawn("probe", self._probe())
            return None

    async def _probe(self) -> None:
        """Pings Redis every RETRY_S until it answers; then the keys of the streams whose
        log lost a batch meanwhile go, and the store is in use again."""
        while True:
            await asyncio.sleep(RETRY_S)
            try:
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    await self.redis.ping()
                for token in list(self._abandoned):
                    await self.redis.delete(*(self._key(token, what) for what in
                                              ("log", "meta", "lease", "reader", "cancel")))
                    self._abandoned.discard(token)
            except (RedisError, OSError, TimeoutError):
                continue
            log.info("state store %s reachable again", _safe(self.url))
            self.failure = None
            return

    def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        super().close()

    async def aclose(self) -> None:
        """close(), after the logs have up to a second to take their last batch (a stream
        handed over: its log without an end, its lease released)."""
        mirrors = [t for name, t in self._tasks.items() if name.startswith("mirror:")]
        if mirrors:
            await asyncio.wait(mirrors, timeout=1.0)
        self.close()
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()


class _Count:
    """A counter where no metrics registry is given."""

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


def _safe(url: str) -> str:
    """The URL without its password, for logs and errors."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)
