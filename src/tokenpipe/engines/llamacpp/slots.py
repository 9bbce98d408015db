"""The KV cache's slots: each of `parallel` sequences owns one, and keeps its cells after it
ends, so the next request whose prompt shares a prefix with a slot's cache (the next turn
of a chat, the same system prompt) skips that prefix; a prompt that shares a clearly
longer prefix with a running sequence (or the very same prompt: the choices of a request
with `n`) copies that sequence's cells instead.

In a shared KV cache (llama.cpp's unified cache: the shared tier, tiers.py) every slot's cells come
from one pool of `capacity` cells: a sequence starts only when its prompt plus max_tokens
fit beside what the running ones may still grow to, emptying the caches of free slots
(least recently used first) to make room; otherwise it waits for one to end. With the split
cache each slot has a fixed stream of its own and nothing is counted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import llama_cpp as lc

from ...constrain import Guide
from ...text import Utf8Decoder
from ...types import TokenLogprob
from ..base import PreparedRequest

SHARE_MIN = 32  # copy a prompt prefix from another sequence when it saves this many tokens


@dataclass(eq=False)
class Seq:
    """One generation as the decode thread sees it."""

    prepared: PreparedRequest
    deliver: Any  # (items) -> None, called on the event loop
    loop: asyncio.AbstractEventLoop
    prompt: list[int]
    max_tokens: int
    cancelled: bool = False
    slot: int = -1
    tier: Any = None  # the tier whose context holds its cells (tiers.py), once it has a slot
    n_past: int = 0  # tokens of this sequence already in the KV cache
    todo: list[int] = field(default_factory=list)  # prompt tokens still to decode
    last: int = -1  # the sampled token that the next step decodes
    generated: int = 0
    sampler: Any = None
    guide: Guide | None = None  # the output format's grammar, when the request has one
    decoder: Utf8Decoder = field(default_factory=Utf8Decoder)
    batch_index: int = -1  # where this step's logits for it are
    donor: Seq | None = None  # a running sequence whose prompt prefix this one will copy
    share: int = 0  # how many prompt tokens it copies from the donor
    cached: int = 0  # prompt tokens taken from a cache (its slot's or a donor's)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # until their text is whole
    spec: Any = None  # its drafts (speculate.Speculation) when the engine speculates
    drafted: int = 0  # tokens drafted for it, and of those, tokens its answer took
    accepted: int = 0


class Slots:
    """Owned by the decode thread. `cached[slot]` lists the tokens the slot's cells hold."""

    def __init__(self, parallel: int) -> None:
        self.parallel = parallel
        self.reused_tokens = 0  # prompt tokens found in a slot's cache, not decoded
        self.shared_tokens = 0  # prompt tokens copied from another sequence
        self.evicted_tokens = 0  # cached cells emptied to make room in the shared cache
        self.moved_tokens = 0  # prompt tokens whose cells came from the split tier's cache
        self.reset(None, None)

    def reset(self, mem: Any, capacity: int | None) -> None:
        """Empty slots over a fresh context's memory (the counters carry on); capacity is
        the shared cache's cells, None for split streams."""
        self._mem = mem
        self.capacity = capacity
        self.cached: list[list[int]] = [[] for _ in range(self.parallel)]
        self.free: list[int] = list(range(self.parallel))
        self._released = [0] * self.parallel  # when each slot was last released
        self._clock = 0

    def assign(self, seq: Seq, active: list[Seq]) -> bool:
        """Gives seq the free slot whose cache shares the longest prefix with its prompt, or
        says False (and changes nothing for seq) when it does not fit the shared cache yet.

        If a running sequence holds (or is about to hold) a clearly longer prefix, seq waits
        for it and copies those cells instead of computing them again: one shared system
        prompt is decoded once, not once per request."""
        best, best_common = self.free[0], -1
        for slot in self.free:
            common = common_prefix(self.cached[slot], seq.prompt)
            if common > best_common:
                best, best_common = slot, common
        if not self._room(seq, best, active):
            return False
        self.free.remove(best)
        limit = len(seq.prompt) - 1  # the last prompt token must be decoded for its logits
        common = min(best_common, limit)
        lc.llama_memory_seq_rm(self._mem, best, common, -1)
        del self.cached[best][common:]
        self.reused_tokens += common
        seq.slot, seq.n_past, seq.todo = best, common, seq.prompt[common:]
        seq.cached = common
        donor, share = None, 0
        for other in active:
            shared = min(common_prefix(other.prompt, seq.prompt), limit)
            # a clearly longer prefix, or the very same prompt (the choices of a request
            # with n: however short, it is decoded once)
            least = common + (1 if other.prompt == seq.prompt else SHARE_MIN)
            if shared >= least and shared > share:
                donor, share = other, shared
        if donor is not None:
            seq.donor, seq.share = donor, share
        return True

    def _room(self, seq: Seq, slot: int, active: list[Seq]) -> bool:
        """The shared cache holds seq's prompt and answer in `slot` beside every running
        sequence's prompt and answer (counted whole: cells shared between sequences are
        counted for each, so this never undercounts) and the other free slots' caches,
        once the least recently used of those are emptied as needed."""
        if self.capacity is None:
            return True
        committed = sum(len(other.prompt) + other.max_tokens for other in active)
        need = committed + len(seq.prompt) + seq.max_tokens
        idle = sorted((s for s in self.free if s != slot and self.cached[s]),
                      key=lambda s: self._released[s])
        held = sum(len(self.cached[s]) for s in idle)
        if need > self.capacity:
            return False  # the running ones' answers may still need the cells: wait
        while idle and need + held > self.capacity:
            victim = idle.pop(0)
            held -= len(self.cached[victim])
            self.evicted_tokens += len(self.cached[victim])
            self.drop(victim)
        return True

    def take_from_donor(self, seq: Seq) -> None:
        """Copies the donor's cells (a whole-stream copy: the only kind llama.cpp does
        between streams), then cuts them to the shared prefix."""
        donor = seq.donor
        assert donor is not None
        lc.llama_memory_seq_rm(self._mem, seq.slot, -1, -1)
        lc.llama_memory_seq_cp(self._mem, donor.slot, seq.slot, -1, -1)
        lc.llama_memory_seq_rm(self._mem, seq.slot, seq.share, -1)
        self.cached[seq.slot] = self.cached[donor.slot][: seq.share]
        self.shared_tokens += seq.share
        seq.n_past, seq.todo = seq.share, seq.prompt[seq.share :]
        seq.cached = seq.share
        seq.donor, seq.share = None, 0

    def release(self, seq: Seq) -> None:
        """The slot is free again; its cells stay for the next prompt that shares them."""
        if seq.slot >= 0:
            self.free.append(seq.slot)
            self._clock += 1
            self._released[seq.slot] = self._clock
            seq.slot = -1

    def drop(self, slot: int) -> None:
        """Empties a slot whose cells are unknown (its decode failed)."""
        if self._mem is not None:  # a closed tier's slots hold nothing
            lc.llama_memory_seq_rm(self._mem, slot, -1, -1)
        self.cached[slot].clear()

    def forget(self) -> None:
        """Empties every slot. Only while no sequence runs."""
        if len(self.free) != self.parallel:
            raise RuntimeError("forget_cache() while sequences are running")
        for slot in range(self.parallel):
            self.drop(slot)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
