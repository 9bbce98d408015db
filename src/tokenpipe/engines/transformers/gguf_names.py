"""A faster GGUF load through transformers: its tensor-name map built once.

transformers maps a GGUF's tensor names to its own by calling `gguf.get_tensor_name_map`
once for every module of the model (397 times for the bundled 135M model), and each call
builds the whole map of the architecture again: 6.4 s of a 16 s load here (cProfile of
`AutoModelForCausalLM.from_pretrained(..., gguf_file=...)`, 2026-12-03). The map depends
only on the architecture and the number of blocks, and transformers only reads it, so it
is built once for each (lru_cache on the package's attribute, which transformers imports
anew at each call)."""

from __future__ import annotations

import functools


def build_once() -> None:
    """Makes gguf.get_tensor_name_map remember its maps (idempotent; nothing where the
    gguf package is not installed: transformers then refuses GGUF files itself)."""
    try:
        import gguf
    except ImportError:
        return
    current = gguf.get_tensor_name_map
    if not hasattr(current, "cache_info"):
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=16)(current)
