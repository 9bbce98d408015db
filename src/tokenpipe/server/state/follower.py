"""A stream another replica produces, followed here from its Redis log (`Follower`), and
taken over here when that replica has stopped (`continue_here`).

When nothing new is logged for a while (at once, too, when a client has just resumed
here), the follower asks whether the producer still holds the stream: its lease lapsed,
or its holder is gone. A lease names its holder's address (`--state-address`, by default
the address this replica serves on); a holder whose address refuses a connection has no
process listening there any more (SIGKILL, a crash), and the stream is taken at once
instead of a lease period later. Where nothing answers at all (a host down, a network
cut), or something else listens on that address now (a replica started again there), the
lease's expiry decides, as without an address. The take is one Lua check-and-set: of
the replicas following one stream, one takes it.

A take-over runs the request again from the logged token ids where the log has them (a
raw prompt of the prompt's ids and the answer's: nothing tokenized again, the count
exact), else with the logged text as the answer begun (an assistant prefill; a raw
prompt with the text appended); the same seed and what is left of max_tokens; and appends
to the same log from the next seq. Greedy and seeded answers that depend on the request
alone (docs/determinism.md) continue as the dead replica would have (from text: unless
re-tokenizing it gives other tokens than the model produced). Streams with reasoning,
tool calls, logprobs or an output format are not continued (they end with
`replica_lost`), nor are background Responses (their replica stores them: ended by a
shutdown, stored as failed; a follower on another replica reads that end)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
from typing import TYPE_CHECKING

from ...engines.prefill import continuation, from_ids
from ...errors import ReplicaLost, ShuttingDown
from ...session import Delta, Failed, Finished, GenerationSession, Progress, Started
from ...types import GenerationRequest, Usage
from ..resumable import Held
from . import codec

if TYPE_CHECKING:
    from .redis_store import RedisResumeStore

log = logging.getLogger("tokenpipe.state")
QUIET_S = 0.3  # nothing logged for this long: is the producer still there?
PROBE_TIMEOUT_S = 0.5  # a holder's address that neither accepts nor refuses by then: unknown

# KEYS: lease; ARGV: the holder seen ("" for none), this replica, lease ms. 1: taken
_TAKE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""


async def gone(holder: str) -> bool:
    """Whether the replica a lease names is known to have stopped: its address (after the
    `@` of the lease's value) refuses a connection. False where that is not known. The
    connect runs in a thread with the socket's own timeout: on a busy event loop an
    asyncio timeout can fire before a refusal that came at once is seen."""
    host, _, port = holder.partition("@")[2].rpartition(":")
    if not host or not port.isdigit():
        return False
    return await asyncio.to_thread(_refuses, host.strip("[]"), int(port))


def _refuses(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # a timeout, no route, a name that does not resolve: unknown
        return False
    return False


class Follower:
    """Feeds a replayed session from the log: what is there now (catch_up), then each
    batch as the producer appends it (follow), until the final event; while a client
    reads it here, the producer is told so (the reader key); when the producer stopped
    (module docstring), this replica takes the stream over."""

    def __init__(self, store: RedisResumeStore, held: Held, fields: dict[str, str]) -> None:
        self.store, self.held, self.session, self.fields = store, held, held.session, fields
        self.token = held.session.stream_token or ""
        self.last_id = b"0"
        self.tokens = 0  # the producer's completion tokens at the last batch
        self.key = store._key(self.token, "log")
        self._take = store.redis.register_script(_TAKE)

    async def catch_up(self, after: int, wait_s: float = 2.0) -> None:
        """Every batch logged so far; where the client says it has seen more (the producer
        sent it before logging it), up to `wait_s` more for the log to reach that seq."""
        entries = await self.store._safely(lambda: self.store.redis.xrange(self.key),
                                           "replaying a stream", lookup=True)
        self._apply(entries or [])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while after >= self.session.next_seq and self.session.final is None:
            left = deadline - loop.time()
            if left <= 0 or not await self._read(int(left * 1000) or 1):
                return

    async def follow(self) -> None:
        store, loop = self.store, asyncio.get_running_loop()
        marked = 0.0
        quiet_ms = int(min(QUIET_S, store.lease_s / 3) * 1000)
        ask = True  # a client resumed here: its connection to the producer may have died
        while self.session.final is None:
            if self.held.reader is not None and loop.time() - marked > store.grace_s / 3:
                marked = loop.time()
                await store.mark_read(self.token)
            if not ask and await self._read(quiet_ms):
                continue
            ask = False
            if store.draining or not await self._producer_stopped():
                continue
            await self._read(1)  # what the producer logged before it stopped
            if self.session.final is None:
                return await continue_here(store, self.held, self.fields, self.tokens)
            await store._safely(lambda: store._release(self.token), "releasing a lease")

    async def _producer_stopped(self) -> bool:
        """Whether this replica now holds the lease of a stream whose producer stopped:
        its lease lapsed, or its holder is gone (module docstring)."""
        store = self.store
        lease = store._key(self.token, "lease")
        holder = await store._safely(lambda: store.redis.get(lease),
                                     "checking a stream's producer")
        if holder is None and store.failure is not None:  # Redis is away: keep waiting
            return False
        seen = holder.decode() if holder is not None else ""
        if seen == store.replica or (seen and not await gone(seen)):
            return False
        took = await store._safely(lambda: self._take(keys=[lease], args=[
            seen, store.replica, int(store.lease_s * 1000)]), "taking a lease")
        if took and seen:
            log.info("stream %s…: its replica %s refuses connections; taken over without "
                     "waiting for its lease", self.token[:6], seen.partition("@")[2])
        return bool(took)

    async def _read(self, block_ms: int) -> bool:
        """Blocks up to block_ms for new batches; whether any came."""
        store = self.store
        found = await store._safely(
            lambda: store.redis.xread({self.key: self.last_id}, block=block_ms),
            "following a stream", block_ms / 1000 + store.call_timeout_s)
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
            self.tokens = session.completion_tokens = int(fields.get(b"n", b"0"))
            if b"p" in fields:
                session.prompt_ids = tuple(json.loads(fields[b"p"]))
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
                elif isinstance(event, Finished | Failed):
                    session.end_with(event)


async def continue_here(store: RedisResumeStore, held: Held, fields: dict[str, str],
                        tokens: int) -> None:
    """This replica holds the lease of a stream whose producer stopped: runs it again from
    where the log ends, as its producer now (the module docstring)."""
    session, token = held.session, held.session.stream_token
    assert token is not None
    request, tokens = _continuation(session, fields, tokens)
    if request is None or store.start is None:
        await store._safely(lambda: store._release(token), "releasing a lease")
        return session.end_with(Failed(ReplicaLost(
            "the replica producing this stream stopped before it ended"), session.usage()))
    base, prompt_tokens = session.next_seq, session.prompt_tokens or 0
    try:  # its token ids logged too: a take-over of this one goes on from them
        run = await store.start(dataclasses.replace(request, token_ids=True), session.api)
    except Exception as exc:  # refused here (shutting down, a model not served here)
        error = exc if isinstance(exc, ShuttingDown) else ReplicaLost(
            f"the replica producing this stream stopped, and continuing it here "
            f"failed: {exc}")  # shutting down: handed over again (hands_over)
        await store._safely(lambda: store._release(token), "releasing a lease")
        session.end_with(Failed(error, session.usage()))
        return
    log.info("stream %s… taken over from a stopped replica at seq %d, from its %s", token[:6],
             base, "text" if request.prompt_ids is None else "token ids")
    store.takeovers.inc()
    store._replayed.discard(token)
    session.bind_cancel(run.cancel)
    session.logged = base  # its readers get what the log has, from here on too
    store._opened.add(token)
    store._spawn(f"mirror:{token}", store._mirror(held, after=base - 1, taken=True))
    cursor = run.cursor()
    try:
        async for event in cursor:
            if isinstance(event, Delta):
                session.completion_tokens = tokens + run.completion_tokens  # logged
                session.replay(dataclasses.replace(event, seq=base + event.seq))
            elif isinstance(event, Finished | Failed):
                usage = Usage(prompt_tokens, tokens + event.usage.completion_tokens)
                session.end_with(dataclasses.replace(event, usage=usage))
    finally:
        cursor.close()
        run.cancel()


def _continuation(session: GenerationSession, fields: dict[str, str], tokens: int
                  ) -> tuple[GenerationRequest | None, int]:
    """The request that goes on from the log, and the answer's tokens it counts as done:
    from the token ids where every delta has them and the prompt's are logged (exact),
    else from the text (`tokens`: the producer's count); None where a continuation would
    not be the same answer (the module docstring; engines/prefill.py)."""
    if "request" not in fields or fields["api"] == "responses":  # stored by its replica
        return None, tokens
    cursor = session.cursor(-1)
    deltas = [d for d in cursor.poll() if isinstance(d, Delta)]
    cursor.close()
    if any(d.channel != "content" for d in deltas):
        return None, tokens
    request, max_tokens = codec.decode_request(fields["request"]), int(fields["max_tokens"])
    prompt = request.prompt_ids if request.prompt_ids is not None else session.prompt_ids
    if prompt is not None and deltas and all(d.token_ids for d in deltas):
        ids = tuple(i for d in deltas for i in d.token_ids)
        exact = from_ids(request, prompt, ids, max_tokens - len(ids))
        if exact is not None:
            return exact, len(ids)
    return continuation(request, "".join(d.text for d in deltas), max_tokens - tokens), tokens
