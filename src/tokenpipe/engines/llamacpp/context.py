"""One llama.cpp context over a loaded model: its parameters and batch."""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from typing import Any

import llama_cpp as lc

from ...errors import EngineError
from . import exact


@dataclass
class Context:
    ctx: Any
    mem: Any
    batch: Any
    batch_cap: int  # tokens one llama_decode may hold
    context_tokens: int  # what one sequence may use: all the cells when they are shared
    shared: bool  # llama.cpp's unified KV cache: one pool of cells for every sequence

    @classmethod
    def open(cls, model: Any, determinism: str, *, cells: int, shared: bool,
             parallel: int, threads: int, batch_min: int) -> Context:
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = cells
        cparams.n_batch = max(2048, batch_min)
        cparams.n_ubatch = 512
        cparams.n_seq_max = parallel
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        # shared: one pool of the cells, a sequence takes what it needs (slots.py counts
        # it); split: a fixed stream of cells / parallel per sequence
        cparams.kv_unified = shared
        cparams.no_perf = True
        exact.context_params(determinism, cparams)  # determinism: the KV cache
        ctx = lc.llama_init_from_model(model, cparams)
        if not ctx:
            raise EngineError("llama.cpp could not create a context")
        return cls(ctx, lc.llama_get_memory(ctx), lc.llama_batch_init(cparams.n_batch, 0, 1),
                   cparams.n_batch, lc.llama_n_ctx_seq(ctx), shared)

    def close(self) -> None:
        lc.llama_batch_free(self.batch)
        lc.llama_free(self.ctx)


def give_back_freed_memory() -> None:
    """Returns freed heap pages to the system (glibc's malloc_trim): a context freed on the
    decode thread leaves its smaller buffers in that thread's malloc arena, resident, until
    trimmed. Does nothing where the C library has no malloc_trim."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:
        trim(0)
