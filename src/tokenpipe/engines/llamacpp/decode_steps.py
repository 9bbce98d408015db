"""llama.cpp alone, for `tokenpipe bench --decode-steps` (what batching can gain on this
machine and model, before any server code) and scripts/bench_speculate.py --price (what
verifying drafted tokens costs)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import llama_cpp as lc

from ...errors import EngineError

if TYPE_CHECKING:
    from .engine import LlamaCppEngine


def time_decode_steps(engine: LlamaCppEngine, sizes: Sequence[int], *, rounds: int,
                      steps: int, prompt_tokens: int) -> dict[int, list[float]]:
    """LlamaCppEngine.time_decode_steps: loads `engine` (not started), times, frees it."""
    engine._load()
    try:
        context = engine._tiers[0].context  # the split tier, when there is one
        ctx, batch, vocab = context.ctx, context.batch, engine._vocab.n_tokens
        need = prompt_tokens + steps + 1
        # every sequence holds its cells at once: a shared cache's share of each
        room = (context.context_tokens // engine.parallel if context.shared
                else context.context_tokens)
        if need > room:
            raise EngineError(f"{need} tokens a sequence do not fit the context "
                              f"({room} a sequence): raise context_size")

        def decode(items: Sequence[tuple[int, int, int, bool]]) -> None:
            for i, (token, pos, seq, logits) in enumerate(items):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
                batch.seq_id[i][0], batch.logits[i] = seq, logits
            batch.n_tokens = len(items)
            rc = lc.llama_decode(ctx, batch)
            if rc != 0:
                raise EngineError(f"llama_decode failed with code {rc}")

        # Each sequence holds a prompt of the same length; after every run of steps they
        # are cut back to it, so every k decodes at the same positions.
        pos = [0] * engine.parallel
        for seq in range(engine.parallel):
            decode([((7 + 13 * i + seq) % vocab, i, seq, i == prompt_tokens - 1)
                    for i in range(prompt_tokens)])
            pos[seq] = prompt_tokens
        times: dict[int, list[float]] = {k: [] for k in sizes}
        for _ in range(rounds):
            for k in sizes:
                for _ in range(steps):
                    items = [((11 * pos[s]) % vocab, pos[s], s, True) for s in range(k)]
                    start = time.perf_counter()
                    decode(items)
                    lc.llama_get_logits_ith(ctx, k - 1)  # the step's results are there
                    times[k].append(time.perf_counter() - start)
                    for s in range(k):
                        pos[s] += 1
                for s in range(k):  # back to the prompt: every k sees the same positions
                    lc.llama_memory_seq_rm(context.mem, s, prompt_tokens, -1)
                    pos[s] = prompt_tokens
        return times
    finally:
        engine._free_context()


def time_verify_steps(engine: LlamaCppEngine, widths: Sequence[int], *, rounds: int,
                      steps: int, prompt_tokens: int) -> dict[int, list[float]]:
    """LlamaCppEngine.time_verify_steps: loads `engine` (not started), times, frees it."""
    engine._load()
    try:
        context = engine._tiers[0].context
        ctx, batch, vocab = context.ctx, context.batch, engine._vocab.n_tokens
        if prompt_tokens + max(widths) > context.context_tokens:
            raise EngineError(f"{prompt_tokens + max(widths)} tokens do not fit the context")

        def decode(first: int, count: int) -> None:
            for i in range(count):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = (
                    (7 + 13 * (first + i)) % vocab, first + i, 1)
                batch.seq_id[i][0], batch.logits[i] = 0, True
            batch.n_tokens = count
            if lc.llama_decode(ctx, batch) != 0:
                raise EngineError("llama_decode failed")

        decode(0, prompt_tokens)
        times: dict[int, list[float]] = {w: [] for w in widths}
        for _ in range(rounds):
            for w in widths:
                for _ in range(steps):
                    start = time.perf_counter()
                    decode(prompt_tokens, w)
                    lc.llama_get_logits_ith(ctx, w - 1)
                    times[w].append(time.perf_counter() - start)
                    lc.llama_memory_seq_rm(context.mem, 0, prompt_tokens, -1)  # drafts gone
        return times
    finally:
        engine._free_context()
