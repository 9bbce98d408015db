"""The resume store shared by replicas (`--state redis://HOST:PORT/DB`): every resumable
stream this replica produces is logged in Redis as it is read, so a client that reconnects
to any replica resumes it from its last seq, nothing lost and nothing repeated.

Keys, under `--state-prefix` (default `tokenpipe`), per stream token:
- `P:TOKEN:log`, a Redis Stream: one entry per batch of session events as the producing
  session sealed them (server/state/codec.py), appended by this replica's mirror task;
- `P:TOKEN:meta`, a hash: the stream id its reader calls it by, the model, the SSE
  rendering (chunk id, created) so every replica renders a resume alike;
- `P:TOKEN:lease`, held by the producing replica while the generation runs (a short
  expiry, renewed): a follower that sees it lapse before the final event knows the
  producer died;
- `P:TOKEN:reader`, set by a replica whose client reads the stream there: the producing
  replica then does not cancel it when its own reader's grace period ends;
- `P:TOKEN:cancel`, set by a replica whose client cancels it there: the producer cancels.
All of them expire: the log and meta a grace period after the last event, so no key
outlives its stream by more than that.

Elsewhere a stream is replayed into a local session (GenerationSession.replay), whose
cursors every door reads as it reads a local one: the doors do not know which it is.

What is not here yet (issue 29): a replica that dies mid-stream is not taken over (the
stream ends with `replica_lost` where another replica follows it); background Responses
and stored Responses stay per replica."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ...errors import ReplicaLost
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
from ..resumable import Held, LocalResumeStore
from . import codec

log = logging.getLogger("tokenpipe.state")
LEASE_S = 3.0  # the producer's lease; renewed every LEASE_S / 3
RETRY_S = 1.0  # Redis away: how often the probe tries it again
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")  # what secrets.token_urlsafe makes


class RedisResumeStore(LocalResumeStore):
    """LocalResumeStore whose streams are logged in Redis, and found there when another
    replica produced them (ResumeStore)."""

    def __init__(self, grace_s: float, url: str, prefix: str = "tokenpipe",
                 on_failure: Callable[[str | None], None] | None = None) -> None:
        super().__init__(grace_s)
        self.url, self.prefix = url, prefix
        self.redis = aioredis.from_url(url, socket_connect_timeout=2, socket_timeout=None)
        self.replica = secrets.token_hex(6)  # this process, as leases name it
        self._tasks: dict[str, asyncio.Task[None]] = {}  # mirrors and followers, by token
        self._replayed: set[str] = set()  # the tokens whose session replays another's log
        self._replays: weakref.WeakSet[GenerationSession] = weakref.WeakSet()
        self._on_failure = on_failure or (lambda reason: None)
        self.failure: str | None = None  # the last Redis error while serving; None: fine
        self._abandoned: set[str] = set()  # streams whose log lost a batch (Redis away)

    async def start(self) -> None:
        """Checks that Redis answers; RuntimeError naming the URL otherwise."""
        try:
            await self.redis.ping()
        except (RedisError, OSError) as exc:
            raise RuntimeError(f"cannot reach the state store {_safe(self.url)}: {exc}") from exc

    def _key(self, token: str, what: str) -> str:
        return f"{self.prefix}:{token}:{what}"

    # ---- the producing replica ------------------------------------------------------------
    def keep(self, held: Held) -> None:
        super().keep(held)
        token = held.session.stream_token
        assert token is not None
        if held.session not in self._replays and token not in self._tasks:
            self._spawn(token, self._mirror(held))

    async def _mirror(self, held: Held) -> None:
        """Logs the session's events in Redis as they are sealed (a follower's cursor:
        what it takes, every reader gets with the same seq), renewing the lease."""
        session = held.session
        token = session.stream_token
        assert token is not None
        cursor = session.cursor(-1, progress=True)
        lease = asyncio.create_task(self._hold_lease(token, session))
        log_key, meta_key = self._key(token, "log"), self._key(token, "meta")
        wrote_meta = logged = False
        try:
            while not cursor.finished:
                events = [e for e in await cursor.next(merge=False) if not isinstance(e, Queued)]
                if not events:
                    continue
                pipe = self.redis.pipeline(transaction=False)
                if not wrote_meta:
                    pipe.hset(meta_key, mapping=_meta(held))
                    wrote_meta = True
                pipe.xadd(log_key, {"e": "[" + ",".join(map(codec.encode, events)) + "]"})
                ttl = self.grace_s if cursor.finished else self.grace_s + LEASE_S * 4
                pipe.pexpire(log_key, int(ttl * 1000))
                pipe.pexpire(meta_key, int(ttl * 1000))
                if await self._safely(pipe.execute, f"logging stream {token[:6]}…") is None:
                    # a batch missing from the log: the stream is this replica's alone now
                    # (its keys go once Redis is back: the probe deletes them)
                    self._abandoned.add(token)
                    return
                logged = True
        finally:
            cursor.close()
            lease.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lease
            if logged and session.final is not None and token not in self._abandoned:
                await self._safely(lambda: self.redis.delete(self._key(token, "lease")),
                                   "releasing a lease")

    async def _hold_lease(self, token: str, session: GenerationSession) -> None:
        """While the generation runs: the lease renewed, the log's expiry pushed on (a
        queued stream writes nothing for a while), and a cancel sent by a client that reads
        it on another replica carried out."""
        ttl_ms = int((self.grace_s + LEASE_S * 4) * 1000)
        while session.final is None:
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(self._key(token, "lease"), self.replica, px=int(LEASE_S * 1000))
            pipe.pexpire(self._key(token, "log"), ttl_ms)
            pipe.pexpire(self._key(token, "meta"), ttl_ms)
            pipe.exists(self._key(token, "cancel"))
            done = await self._safely(pipe.execute, "renewing a lease")
            if done and done[-1]:
                log.info("stream %s… cancelled by a client on another replica", token[:6])
                session.cancel()
            await asyncio.sleep(LEASE_S / 3)

    def _expire(self, token: str) -> None:
        """The grace period here ended: cancelled unless a client reads it elsewhere."""
        if token in self._replayed:
            self._tasks.pop(token, asyncio.Future()).cancel()
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
        super()._expire(token)

    # ---- a replica a client resumes on ----------------------------------------------------
    async def find(self, token: str, after: int = -1) -> Held | None:
        held = self._held.get(token)
        if held is not None or not _TOKEN.fullmatch(token):
            return held
        meta = await self._safely(lambda: self.redis.hgetall(self._key(token, "meta")),
                                  "looking a stream up")
        if not meta:
            return None
        fields = {k.decode(): v.decode() for k, v in meta.items()}
        session = GenerationSession(None, fields["model"], resumable=True, api=fields["api"])
        session.stream_token = token
        held = Held(session, fields["stream_id"], sse=_origin(fields))
        follower = _Follower(self, held)
        session.bind_cancel(lambda: self._spawn(f"cancel:{token}", self._cancel_there(token)))
        await follower.catch_up(after)
        if token in self._held:  # found by another resume meanwhile
            return self._held[token]
        self._replayed.add(token)
        self._replays.add(session)
        super().keep(held)
        self._spawn(token, follower.follow())
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
                                                  px=int((self.grace_s + LEASE_S) * 1000)),
                           "cancelling a stream on its replica")

    # ---- both ---------------------------------------------------------------------------
    def _spawn(self, name: str, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._tasks.pop(name, None) if self._tasks.get(
            name) is t else None)

    async def _safely(self, call: Callable[[], Awaitable[Any]], what: str) -> Any:
        """A Redis call whose failure costs the shared state, never a stream: None when it
        failed, or when Redis is known to be away (nothing but the probe calls it then).
        The first failure is logged, /health says degraded (`failure`) until the probe
        reaches Redis again."""
        if self.failure is not None:
            return None
        try:
            return await call()
        except (RedisError, OSError) as exc:
            if self.failure is None:  # calls in flight at once fail together: once
                log.warning("state store %s unreachable (%s): %s; streams go on, resumable "
                            "on this replica only until it is back", _safe(self.url), what,
                            exc)
                self.failure = f"state store unreachable: {exc}"
                self._on_failure(self.failure)
                self._spawn("probe", self._probe())
            return None

    async def _probe(self) -> None:
        """Pings Redis every RETRY_S until it answers; then the keys of the streams whose
        log lost a batch meanwhile go, and the store is in use again."""
        while True:
            await asyncio.sleep(RETRY_S)
            try:
                await self.redis.ping()
                for token in list(self._abandoned):
                    await self.redis.delete(*(self._key(token, what) for what in
                                              ("log", "meta", "lease", "reader", "cancel")))
                    self._abandoned.discard(token)
            except (RedisError, OSError):
                continue
            log.info("state store %s reachable again", _safe(self.url))
            self.failure = None
            self._on_failure(None)
            return

    def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
        super().close()

    async def aclose(self) -> None:
        self.close()
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()


class _Follower:
    """Feeds a replayed session from the log: what is there now (catch_up), then each
    batch as the producer appends it (follow), until the final event; while a client
    reads it here, the producer is told so (the reader key)."""

    def __init__(self, store: RedisResumeStore, held: Held) -> None:
        self.store, self.held, self.session = store, held, held.session
        self.token = held.session.stream_token or ""
        self.last_id = b"0"
        self.key = store._key(self.token, "log")

    async def catch_up(self, after: int, wait_s: float = 2.0) -> None:
        """Every batch logged so far; where the client says it has seen more (the producer
        sent it before logging it), up to `wait_s` more for the log to reach that seq."""
        entries = await self.store._safely(lambda: self.store.redis.xrange(self.key),
                                           "replaying a stream")
        self._apply(entries or [])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while after >= self.session.next_seq and self.session.final is None:
            left = deadline - loop.time()
            if left <= 0 or not await self._read(int(left * 1000) or 1):
                return

    async def follow(self) -> None:
        store, loop = self.store, asyncio.get_running_loop()
        marked = quiet = 0.0
        while self.session.final is None:
            if self.held.reader is not None and loop.time() - marked > store.grace_s / 3:
                marked = loop.time()
                await store.mark_read(self.token)
            if await self._read(int(LEASE_S * 1000)):
                quiet = 0.0
                continue
            quiet += LEASE_S
            alive = await store._safely(
                lambda: store.redis.exists(store._key(self.token, "lease")),
                "checking a stream's producer")
            if alive == 0:  # None: Redis is away, keep waiting
                self.session.end_with(Failed(ReplicaLost(
                    "the replica producing this stream stopped before it ended"),
                    self.session.usage()))

    async def _read(self, block_ms: int) -> bool:
        """Blocks up to block_ms for new batches; whether any came."""
        found = await self.store._safely(
            lambda: self.store.redis.xread({self.key: self.last_id}, block=block_ms),
            "following a stream")
        if not found:
            if found is None:
                await asyncio.sleep(block_ms / 1000)  # Redis away: do not spin
            return False
        for _, entries in found:
            self._apply(entries)
        return True

    def _apply(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        session = self.session
        for entry_id, fields in entries:
            self.last_id = entry_id
            for data in json.loads(fields[b"e"]):
                event = codec.decode(json.dumps(data))
                if isinstance(event, Delta):
                    if event.seq > session.next_seq:  # its producer lost Redis meanwhile
                        session.end_with(Failed(ReplicaLost(
                            "this stream's log is incomplete (its replica lost the state "
                            "store); resume it on the replica that produced it"),
                            session.usage()))
                        return
                    if event.seq == session.next_seq:
                        session.replay(event)
                elif isinstance(event, Started):
                    session.mark_started(event.prompt_tokens)
                elif isinstance(event, Progress):
                    session.set_progress(event.done, event.total)
                elif isinstance(event, (Finished, Failed)):
                    session.end_with(event)


def _meta(held: Held) -> dict[Any, str]:
    session = held.session
    out: dict[Any, str] = {"stream_id": held.stream_id, "model": session.model,
                                          "api": session.api}
    scored = (not session.loading
              and session.prepared.request.params.logprobs is not None)
    out["scored"] = "1" if scored else ""
    sse = held.sse
    shape = getattr(sse, "shape", None)
    if shape is not None:
        out["sse"] = json.dumps({"kind": type(shape).__name__, "head": shape.head,
                                 "usage": bool(getattr(sse, "include_usage", False))})
    return out


def _origin(fields: dict[str, str]) -> object:
    """The SSE rendering the producer chose (the same chunk id and created on every
    replica)."""
    from ...protocol.openai.render import ChatRender, CompletionRender
    from ..openai.resumable_sse import SseOrigin

    scored = bool(fields.get("scored"))
    if "sse" not in fields:  # a v1 stream: rendered as chat chunks from this resume on
        return SseOrigin(ChatRender(fields["model"], scored=scored))
    data = json.loads(fields["sse"])
    cls = CompletionRender if data["kind"] == "CompletionRender" else ChatRender
    shape = cls(fields["model"], scored=scored)
    shape.head = data["head"]
    return SseOrigin(shape, data["usage"])


def _safe(url: str) -> str:
    """The URL without its password, for logs and errors."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)
