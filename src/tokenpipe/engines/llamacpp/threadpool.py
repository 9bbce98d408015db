"""A persistent ggml thread pool for the llama contexts of one engine, as llama-server uses.

Without one, every llama_decode starts and joins its worker threads; with one, the workers
stay and poll briefly between steps (about 2 ms a step saved at 8 sequences here).
llama-cpp-python does not bind these functions, so they are reached through ctypes on the
libraries it already loaded. Any mismatch makes this a no-op: decoding still works.
One pool serves every context of the engine (the KV cache's tiers): they decode one after
the other on the decode thread, and a second pool's workers would poll beside the first's.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("tokenpipe.llamacpp")

GGML_MAX_N_THREADS = 512


class _ThreadpoolParams(ctypes.Structure):
    _fields_ = [
        ("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS),
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),
        ("poll", ctypes.c_uint32),
        ("strict_cpu", ctypes.c_bool),
        ("paused", ctypes.c_bool),
    ]


class Threadpool:
    def __init__(self, handle: int, lib: Any, free: Any) -> None:
        self.handle = handle
        self._lib = lib
        self._free = free
        self._attached: list[Any] = []

    def attach(self, ctx: Any) -> None:
        """ctx decodes on this pool from now on (until close)."""
        ctx_ptr = ctypes.cast(ctx, ctypes.c_void_p)
        self._lib.llama_attach_threadpool(ctx_ptr, self.handle, self.handle)
        self._attached.append(ctx_ptr)

    def detach(self, ctx: Any) -> None:
        """ctx leaves the pool (before it is freed while the pool goes on)."""
        ctx_ptr = ctypes.cast(ctx, ctypes.c_void_p)
        for i, attached in enumerate(self._attached):
            if attached.value == ctx_ptr.value:
                self._lib.llama_detach_threadpool(attached)
                del self._attached[i]
                return

    def close(self) -> None:
        """Detaches every context (before they are freed), then frees the pool."""
        if self.handle:
            for ctx_ptr in self._attached:
                self._lib.llama_detach_threadpool(ctx_ptr)
            self._attached.clear()
            self._free(self.handle)
            self.handle = 0


def create(n_threads: int, poll: int = 50) -> Threadpool | None:
    """A pool of n_threads (attach contexts to it); None if this build can't."""
    try:
        import llama_cpp
        from llama_cpp import llama_cpp as bindings

        libdir = Path(llama_cpp.__file__).parent / "lib"
        base = ctypes.CDLL(str(libdir / "libggml-base.so"))
        cpu = ctypes.CDLL(str(libdir / "libggml-cpu.so"))
        lib = bindings._lib
        base.ggml_threadpool_params_default.argtypes = [ctypes.c_int]
        base.ggml_threadpool_params_default.restype = _ThreadpoolParams
        cpu.ggml_threadpool_new.argtypes = [ctypes.POINTER(_ThreadpoolParams)]
        cpu.ggml_threadpool_new.restype = ctypes.c_void_p
        cpu.ggml_threadpool_free.argtypes = [ctypes.c_void_p]
        cpu.ggml_threadpool_free.restype = None
        lib.llama_attach_threadpool.argtypes = [ctypes.c_void_p] * 3
        lib.llama_attach_threadpool.restype = None
        lib.llama_detach_threadpool.argtypes = [ctypes.c_void_p]
        lib.llama_detach_threadpool.restype = None
    except (OSError, AttributeError, ImportError) as exc:
        log.info("no persistent thread pool (%s); decoding without one", exc)
        return None
    params = base.ggml_threadpool_params_default(n_threads)
    if params.n_threads != n_threads:  # the struct layout differs from this build's
        log.info("ggml_threadpool_params layout mismatch; decoding without a thread pool")
        return None
    params.poll = poll
    handle = cpu.ggml_threadpool_new(ctypes.byref(params))
    if not handle:
        return None
    return Threadpool(handle, lib, cpu.ggml_threadpool_free)
