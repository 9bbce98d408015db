"""The KV cache's layout (--kv-cache): which llama.cpp contexts hold the sequences' cells.

- split: one context, a fixed stream of ctx-size / parallel cells for each sequence;
- shared: one context whose cells are one pool (llama.cpp's unified cache): a conversation
  may use all of it while the others leave room (slots.py counts it);
- tiered (the default): both, over one loaded model, half of ctx-size each. A request goes
  to the split tier when its prompt plus max_tokens fit a stream there, else to the shared
  tier, which a conversation may fill alone.

Why two: in a unified cache every row's attention walks the cells of every sequence (the
CPU flash-attention kernel skips another sequence's cells one by one), so 8 short streams
decode 0.92x as fast as in split streams, 0.74x at 800 cells each (docs/benchmarks.md).
Tiered keeps split speed for what fits a stream and lets a long conversation use the
model's trained context. The tier is a function of the request alone, never of the load,
so the answer to a request does not depend on what else runs. A conversation that
outgrows its stream moves its cached turns to the shared tier (migrate.py) instead of
decoding them again. While both tiers have sequences, a step is one llama_decode each.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import llama_cpp as lc

from ...errors import EngineError
from ..base import DEFAULT_CONTEXT
from . import migrate
from .context import Context
from .slots import SHARE_MIN, Seq, Slots, common_prefix

log = logging.getLogger("tokenpipe.llamacpp")

KV_CACHES = ("tiered", "shared", "split")


def layout(kv_cache: str, cells: int, parallel: int) -> list[tuple[bool, int]]:
    """(shared, cells) for each tier, the split one first."""
    if kv_cache not in KV_CACHES:
        raise EngineError(f"kv_cache must be one of {', '.join(KV_CACHES)}, "
                          f"not {kv_cache!r}")
    if kv_cache == "tiered" and parallel > 1:
        return [(False, cells // 2), (True, cells - cells // 2)]
    # one sequence: a split stream is the whole context, as a pool would be
    return [(kv_cache == "shared" and parallel > 1, cells)]


def default_cells(kv_cache: str, parallel: int, trained: int) -> int:
    """Without --ctx-size: the model's trained context (at most DEFAULT_CONTEXT), twice for
    tiered (a split tier as large as the shared one, which one conversation may fill)."""
    base = min(trained, DEFAULT_CONTEXT) if trained > 0 else DEFAULT_CONTEXT
    return 2 * base if kv_cache == "tiered" and parallel > 1 else base


def per_sequence(kv_cache: str, cells: int, parallel: int) -> int:
    """What one conversation may use (before llama.cpp rounds the contexts)."""
    return max(c if shared else c // parallel for shared, c in layout(kv_cache, cells, parallel))


@dataclass(eq=False)
class Tier:
    """A context and its slots. A tier may be closed (no context, no cells in memory): the
    shared tier of the tiered layout is, until a conversation outgrows a split stream, and
    again once it has been idle for --shared-tier-keep-alive."""

    slots: Slots
    shared: bool
    cells: int
    context_tokens: int = 0  # what one sequence may use here (llama.cpp's, once opened)
    lazy: bool = False  # closed while idle (opened again when a sequence needs it)
    last_used: float = 0.0  # time.monotonic() when a sequence last left it
    _context: Context | None = None

    def open(self, model: Any, determinism: str, *, threads: int, batch_min: int) -> Context:
        """Allocates the tier's context (its KV cells); its slots start empty."""
        context = Context.open(model, determinism, cells=self.cells, shared=self.shared,
                               parallel=self.slots.parallel, threads=threads,
                               batch_min=batch_min)
        self._context = context
        self.context_tokens = context.context_tokens
        self.slots.reset(context.mem, context.context_tokens if self.shared else None)
        self.last_used = time.monotonic()
        return context

    def close(self) -> None:
        """Frees the context and its cells; the slots' caches are gone with them."""
        if self._context is not None:
            self._context.close()
            self._context = None
            self.slots.reset(None, None)

    @property
    def is_open(self) -> bool:
        return self._context is not None

    @property
    def context(self) -> Context:
        """The open tier's context (the decode thread opens a tier before it assigns it)."""
        assert self._context is not None, "the tier is closed"
        return self._context

    def holds(self, seq: Seq) -> bool:
        """seq's prompt and answer fit what one sequence may use here."""
        return len(seq.prompt) + seq.max_tokens <= self.context_tokens

    @property
    def label(self) -> str:
        if self.shared:
            return f"{self.context_tokens} shared" + (" (on demand)" if self.lazy else "")
        return f"{self.slots.parallel} x {self.context_tokens} split"


def tier_for(tiers: list[Tier], seq: Seq) -> Tier:
    """The first tier that holds seq (prepare() checked it against the largest)."""
    for tier in tiers:
        if tier.holds(seq):
            return tier
    return tiers[-1]


def move_prefix(seq: Seq, tiers: list[Tier]) -> None:
    """seq has just been given a slot in the shared tier: when a free slot of the split tier
    caches a clearly longer prefix of its prompt (the conversation's earlier turns), those
    cells move over instead of being decoded again."""
    dst = seq.tier
    src = tiers[0]
    if src is dst or seq.donor is not None:
        return
    limit = len(seq.prompt) - 1  # the last prompt token is decoded for its logits
    best, best_common = -1, seq.n_past
    for slot in src.slots.free:
        common = min(common_prefix(src.slots.cached[slot], seq.prompt), limit)
        if common >= best_common + SHARE_MIN:
            best, best_common = slot, common
    if best < 0:
        return
    # the slot's own shorter prefix gives way (assign counted it as reused); the restore
    # needs at most the stream's cells, fewer than the prompt plus max_tokens counted as
    # this sequence's room, since it did not fit a stream
    dst.slots.reused_tokens -= seq.n_past
    lc.llama_memory_seq_rm(dst.context.mem, seq.slot, -1, -1)
    if not migrate.move(src.context.ctx, best, src.slots.parallel, dst.context.ctx, seq.slot):
        # (the pool had no run of free cells long enough): the slot's own prefix went too
        lc.llama_memory_seq_rm(dst.context.mem, seq.slot, -1, -1)
        dst.slots.cached[seq.slot].clear()
        seq.n_past, seq.todo, seq.cached = 0, list(seq.prompt), 0
        return
    moved = len(src.slots.cached[best])
    lc.llama_memory_seq_rm(dst.context.mem, seq.slot, best_common, -1)
    dst.slots.cached[seq.slot] = src.slots.cached[best][:best_common]
    dst.slots.moved_tokens += best_common
    seq.n_past, seq.todo = best_common, seq.prompt[best_common:]
    seq.cached = best_common
    log.debug("moved %d cached cells (%d kept) from the split tier", moved, best_common)

