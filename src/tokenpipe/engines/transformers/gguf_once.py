"""A faster GGUF load through transformers: what it does many times, done once.

Measured on the bundled 135M model (cProfile of the tokenizer's and the model's
from_pretrained with `gguf_file`, 2026-12-03): a load took 15-16 s, of which
- 6.4 s building gguf's tensor-name map: transformers calls `gguf.get_tensor_name_map` once
  for every module of the model (397 times), and each call builds the architecture's whole
  map again. It depends only on the architecture and the number of blocks and is only
  read: `build_once` remembers it (lru_cache on the package's attribute, which transformers
  imports anew at each call).
- about 5 s a parse of the file's metadata (`gguf.GGUFReader`: the 49,152-token vocabulary
  one memmap index at a time), done three times: for the tokenizer, the config and the
  weights. `read_once` hands every reader of one file the same parse while a model loads
  (transformers only reads it), then lets it go.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

_LOADING = threading.Lock()  # one load at a time holds the package's reader in place


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


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """While the block runs, `gguf.GGUFReader(path)` parses each file once and hands the
    same reader to every later call for it; loads that use it run one at a time."""
    build_once()
    try:
        import gguf
    except ImportError:
        yield
        return
    package: Any = gguf  # its reader class is swapped for a function for the while
    with _LOADING:
        original = package.GGUFReader
        readers: dict[tuple[str, str], Any] = {}

        def reader(path: Any, mode: str = "r") -> Any:
            key = (os.fspath(path), mode)
            if key not in readers:
                readers[key] = original(path, mode)
            return readers[key]

        package.GGUFReader = reader
        try:
            yield
        finally:
            package.GGUFReader = original
