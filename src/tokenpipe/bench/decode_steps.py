"""--decode-steps: llama.cpp's batched decode alone, no server, through the llama.cpp
engine's public LlamaCppEngine.time_decode_steps: what batching can gain on this machine."""

from __future__ import annotations

import argparse
import statistics
import sys

from ..engines.base import EngineOptions, bundled_model_path
from ..engines.llamacpp import LlamaCppEngine
from ..errors import TokenpipeError


def decode_steps(args: argparse.Namespace) -> int:
    top = max(1, args.concurrency)
    sizes = sorted({1, top, *(k for k in (2, 4, 8, 16, 32, 64) if k < top)})
    path = args.model_path or str(bundled_model_path())
    options = EngineOptions(model=path, threads=args.threads, parallel=top,
                            context_size=max(8192, top * 512))
    try:
        times = LlamaCppEngine.time_decode_steps(options, sizes, rounds=max(1, args.rounds))
    except TokenpipeError as exc:
        print(f"tokenpipe bench: {exc.message}", file=sys.stderr)
        return 2
    base = statistics.median(times[1])
    print(f"llama_decode alone, {path}, {args.threads or 'all'} threads, one token for each"
          f" of k sequences a step (median of {len(times[1])} steps):")
    for k in sizes:
        t = statistics.median(times[k])
        print(f"  k={k:<3d} {t * 1000:7.1f} ms a step  {k / t:7.1f} tok/s"
              f"  {k * base / t:5.2f}x one sequence's rate")
    return 0
