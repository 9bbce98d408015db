"""--reference llama-cpp-python: the same prompt through llama-cpp-python's own
create_chat_completion(stream=True), in this process, one stream, always on the same
thread: a second thread that had decoded would keep an OpenMP team that slows every later
decode (engines/llamacpp/compute.py), and the reference ran at 73-160 tokens/s by which
executor thread a round landed on."""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import os
from typing import Any

from llama_cpp import Llama

from ..engines.base import bundled_model_path
from .results import RunResult, StreamResult

_LLAMA: Any = None  # loaded once, kept for every round


@functools.cache
def reference_thread() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that loads and runs the reference."""
    return concurrent.futures.ThreadPoolExecutor(1, "llama-cpp-python")


def reference_run(args: argparse.Namespace, messages: list[dict[str, str]]) -> RunResult:
    global _LLAMA
    if _LLAMA is None:
        path = args.model_path or str(bundled_model_path())
        threads = args.threads or os.cpu_count() or 1
        _LLAMA = Llama(model_path=path, n_ctx=2048, n_threads=threads,
                       n_threads_batch=threads, verbose=False)
    result = StreamResult()
    result.start()
    for chunk in _LLAMA.create_chat_completion(
        messages=messages, max_tokens=args.max_tokens, temperature=0.0, stream=True,
    ):
        if chunk["choices"][0]["delta"].get("content"):
            result.arrived()
            result.tokens += 1
    result.stop()
    return RunResult("llama-cpp-python", [result], result.total)
