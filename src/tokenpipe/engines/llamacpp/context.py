"""One llama.cpp context over a loaded model: its parameters, batch and thread pool."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import llama_cpp as lc

from ...errors import EngineError
from ..base import EngineOptions
from . import exact, threadpool

KV_CACHES = ("shared", "split")


@dataclass
class Context:
    ctx: Any
    mem: Any
    batch: Any
    batch_cap: int  # tokens one llama_decode may hold
    threads: int
    context_tokens: int  # what one sequence may use: all of it when the cache is shared
    shared: bool  # llama.cpp's unified KV cache: one pool of cells for every sequence
    _pool: Any

    @classmethod
    def open(cls, model: Any, options: EngineOptions, parallel: int, batch_min: int
             ) -> Context:
        threads = options.threads or os.cpu_count() or 1
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = options.context_size
        cparams.n_batch = max(2048, batch_min)
        cparams.n_ubatch = 512
        cparams.n_seq_max = parallel
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        # shared: one pool of n_ctx cells, a sequence takes what it needs (slots.py counts
        # it); split: a fixed stream of n_ctx / parallel cells per sequence
        if options.kv_cache not in KV_CACHES:
            raise EngineError(f"kv_cache must be one of {', '.join(KV_CACHES)}, "
                              f"not {options.kv_cache!r}")
        cparams.kv_unified = options.kv_cache == "shared"
        cparams.no_perf = True
        exact.context_params(options.determinism, cparams)  # determinism: the KV cache
        ctx = lc.llama_init_from_model(model, cparams)
        if not ctx:
            raise EngineError("llama.cpp could not create a context")
        return cls(ctx, lc.llama_get_memory(ctx), lc.llama_batch_init(cparams.n_batch, 0, 1),
                   cparams.n_batch, threads, lc.llama_n_ctx_seq(ctx), cparams.kv_unified,
                   threadpool.attach(ctx, threads))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        lc.llama_batch_free(self.batch)
        lc.llama_free(self.ctx)
