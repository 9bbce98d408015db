"""Faults injected into a real `tokenpipe serve` process, for tests/e2e/test_engine_faults.py.

Python imports this module at start-up when this folder is on PYTHONPATH (only those tests
put it there). It wraps two llama.cpp calls the engine makes, so that a test can make them
fail at a moment it chooses, from outside, by creating a file:

    TOKENPIPE_TEST_DECODE_FAULT=PATH    the next llama_decode raises while PATH exists
                                        (PATH is removed: one fault per file)
    TOKENPIPE_TEST_CONTEXT_FAULT=PATH   llama_init_from_model returns NULL while PATH exists
                                        (the engine cannot get a fresh context)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

_decode_flag = os.environ.get("TOKENPIPE_TEST_DECODE_FAULT")
_context_flag = os.environ.get("TOKENPIPE_TEST_CONTEXT_FAULT")

if _decode_flag or _context_flag:
    import llama_cpp

    _decode = llama_cpp.llama_decode
    _init = llama_cpp.llama_init_from_model

    def _faulty_decode(ctx: Any, batch: Any) -> int:
        if _decode_flag and Path(_decode_flag).exists():
            Path(_decode_flag).unlink(missing_ok=True)
            raise RuntimeError("injected decode fault")
        return int(_decode(ctx, batch))

    def _faulty_init(model: Any, params: Any) -> Any:
        if _context_flag and Path(_context_flag).exists():
            return None
        return _init(model, params)

    llama_cpp.llama_decode = _faulty_decode
    llama_cpp.llama_init_from_model = _faulty_init
