"""Which llama.cpp kernels compute a token, so that its answer is a function of the request.

A row's numbers must not depend on what shares its llama_decode: how many rows, whether it
is a prompt chunk or a decode step, how long the other sequences are. With llama.cpp's
defaults on CPU they do (measured, docs/determinism.md):

- flash attention over an F16 KV cache takes one of three kernels by shape: KV split
  across threads for a lone decode row past 512 cells, tiles for long prompt chunks, one
  row at a time otherwise; without flash attention, K·Q and V·softmax go through
  llamafile's tinyBLAS for two rows or more and ggml's vec_dot for one;
- repacked (CPU_REPACK) and AMX weight buffers have a gemv for one row and a gemm for more;
- the tiled K-quant matmul runs from 8 rows up (GGML_CPU_TILED_MM).

"exact" picks the kernels that compute every row alone: flash attention over a BF16 KV
cache (llama.cpp has only its row-at-a-time kernel for K and V other than F16 and F32;
BF16 measured faster than F16 and Q8_0 here, with the same fidelity), weights in plain CPU
buffers, no tiled matmul. Q4_0, Q4_1, Q5_0, Q8_0 and K-quant weights are then
exact (llamafile's quantized tinyBLAS adds each block in the order vec_dot does). F16,
BF16, F32 and IQ4_NL weights are not: their tinyBLAS and vec_dot sum in other orders.
"serial" adds one token per llama_decode, exact for every weight type, at a large cost.
"fast" is llama.cpp's defaults.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import llama_cpp as lc
import numpy as np

log = logging.getLogger("tokenpipe.llamacpp")

MODES = ("exact", "serial", "fast")
GGML_TYPE_BF16 = 30  # ggml.h's enum ggml_type; llama-cpp-python 0.3.36 does not export it


def model_params(mode: str, mparams: Any) -> None:
    """Weights in plain CPU buffers, without the tiled K-quant matmul (not in "fast")."""
    if mode != "fast":
        mparams.use_extra_bufts = False
        # ggml reads this once per process, at its first K-quant matmul; an explicit value
        # wins, and it holds for every engine of the process.
        os.environ.setdefault("GGML_CPU_TILED_MM", "0")


def context_params(mode: str, cparams: Any) -> None:
    """Flash attention over a BF16 KV cache: its row-at-a-time kernel (not in "fast")."""
    if mode != "fast":
        cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cparams.type_k = GGML_TYPE_BF16
        cparams.type_v = GGML_TYPE_BF16


def rows_are_exact(ctx: Any, mem: Any, batch: Any, n_vocab: int, seqs: int) -> bool:
    """Checks on this model and machine that a row's logits are bit-identical whether the
    row is decoded inside a 16-token chunk or alone, and alone or beside another sequence.
    Uses sequences 0 and 1 and clears them; call it before any request runs."""
    tokens = [(97 + 131 * i) % n_vocab for i in range(17)]

    def decode(rows: list[tuple[int, int, int]], want: int) -> bytes:
        for i, (seq, token, pos) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, i == want
        batch.n_tokens = len(rows)
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed during the determinism check")
        logits = lc.llama_get_logits_ith(ctx, want)
        return bytes(np.ctypeslib.as_array(logits, shape=(n_vocab,)).tobytes())

    try:
        in_chunk = decode([(0, t, i) for i, t in enumerate(tokens[:16])], 15)
        lc.llama_memory_seq_rm(mem, 0, 15, -1)
        alone = decode([(0, tokens[15], 15)], 0)
        if in_chunk != alone:
            return False
        if seqs < 2:
            return True
        step_alone = decode([(0, tokens[16], 16)], 0)
        lc.llama_memory_seq_rm(mem, 0, 16, -1)
        lc.llama_memory_seq_cp(mem, 0, 1, -1, -1)
        # llama.cpp puts rows in one ubatch only for increasing, consecutive sequence ids
        step_beside = decode([(0, tokens[16], 16), (1, tokens[0], 16)], 0)
        return step_alone == step_beside
    finally:
        lc.llama_memory_seq_rm(mem, 0, -1, -1)
        lc.llama_memory_seq_rm(mem, 1, -1, -1)


def check(mode: str, context: Any, n_vocab: int, seqs: int) -> bool | None:
    """The load-time verdict for a fresh context: rows_are_exact in "exact" mode (a warning
    if not), None otherwise (serial: one row per decode, exact by construction; fast:
    llama.cpp's kernels, whose shape-dependent paths no short check sees)."""
    if mode != "exact":
        return None
    verdict = rows_are_exact(context.ctx, context.mem, context.batch, n_vocab, seqs)
    if not verdict:
        log.warning("this model's weight types make a token's arithmetic depend on its "
                    "batch (docs/determinism.md): greedy answers may vary with caching "
                    "and load; --determinism serial makes them exact, slowly")
    return verdict
