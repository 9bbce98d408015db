"""Where the llama.cpp decode thread's time goes at one stream (issue 33 item 1): the
engine in-process with its default settings, one greedy answer at a time, the decode
thread under cProfile (its own profiler: cProfile sees only the thread that enables it).

    python scripts/profile_decode.py --tokens 256 --answers 3 [--threads 2] [--top 25]

Prints the decode thread's wall time, the share inside llama_decode, and the functions
with the most time of their own. cProfile adds its own cost to every Python call (not to
the time inside llama_decode, one C call), so the Python shares it prints are upper
bounds; the plain figure beside them (tokens/s without the profiler) is the real rate."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time

from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.llamacpp import LlamaCppEngine
from tokenpipe.types import (
    EngineText,
    GenerationRequest,
    Message,
    SamplingParams,
)

PROMPT = "Write a long story about a lighthouse keeper and a storm."


async def answers(engine: LlamaCppEngine, count: int, tokens: int) -> float:
    """Seconds of `count` answers of `tokens` tokens (the prompt's cache warm after the
    first), one at a time."""
    request = GenerationRequest(messages=(Message("user", PROMPT),),
                                params=SamplingParams(max_tokens=tokens))
    started = time.perf_counter()
    for _ in range(count):
        made = [e async for e in engine.stream(engine.prepare(request, tokens))
                if isinstance(e, EngineText)]
        assert made
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--answers", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    options = EngineOptions(threads=args.threads)

    async def plain() -> float:
        engine = LlamaCppEngine(options)
        await engine.load()
        try:
            await answers(engine, 1, 16)  # warm-up
            return await answers(engine, args.answers, args.tokens)
        finally:
            await engine.aclose()

    seconds = asyncio.run(plain())
    print(f"without the profiler: {args.answers * args.tokens / seconds:.1f} tok/s "
          f"({args.threads} threads)")

    profile = cProfile.Profile()
    run = LlamaCppEngine._run

    def profiled(self: LlamaCppEngine) -> None:
        profile.runcall(run, self)

    LlamaCppEngine._run = profiled  # type: ignore[method-assign]

    async def measured() -> float:
        engine = LlamaCppEngine(options)
        await engine.load()
        try:
            await answers(engine, 1, 16)
            profile.clear()  # what follows: the answers alone, idle waits included
            return await answers(engine, args.answers, args.tokens)
        finally:
            await engine.aclose()

    seconds = asyncio.run(measured())
    stats = pstats.Stats(profile)
    entries = stats.stats  # type: ignore[attr-defined]

    def own(name: str) -> float:  # time inside functions of that name, their own
        return sum(v[2] for k, v in entries.items() if k[2] == name)

    def within(name: str) -> float:  # time inside functions of that name and below
        return sum(v[3] for k, v in entries.items() if k[2] == name)

    total = sum(v[2] for v in entries.values())
    tokens = args.answers * args.tokens
    # timed_decode holds nothing but llama_decode (ctypes calls are not profiled apart)
    parts = {"llama_decode": own("timed_decode"),
             "sampling, mask, logprobs, text (produce)": within("produce"),
             "hand-over to the loop (hand_over)": within("hand_over"),
             "planning the step (_plan)": within("_plan"),
             "admission, cancels, idle tiers": within("_admit") + within("_drop_cancelled")
             + within("_close_idle_tiers"),
             "waiting for work": own("wait")}
    print(f"with the profiler: {tokens / seconds:.1f} tok/s; the decode thread's "
          f"{total:.2f} s:")
    for name, spent in parts.items():
        print(f"  {name:42s} {spent / total:6.1%}  {spent * 1000 / tokens:6.3f} ms a token")
    rest = total - sum(parts.values())
    print(f"  {'the rest':42s} {rest / total:6.1%}  {rest * 1000 / tokens:6.3f} ms a token")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
