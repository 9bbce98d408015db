"""What a newcomer's prompt costs a streaming answer, and what the streaming answer costs the
newcomer: `--prompt-step-ms` (engines/llamacpp/pace.py) against chunks of 512 tokens.

    python scripts/measure_prompt_pace.py [--rounds 2] [--src src] [-- serve flags...]

Each round starts `tokenpipe serve` (the bundled model, --parallel 4) twice, A with
`--prompt-step-ms 0` (a prompt takes up to 512 tokens a step, as before pace.py) and B with
the default, one after the other (A B A B). In each: a greedy bystander stream of 400
tokens over Chat Completions; once it has begun, six newcomers arrive 0.8 s apart with
prompts of about 30, 300 and 1,200 tokens (twice each), each asking for 8 tokens. Printed:
the bystander's worst and 99th-percentile gap between chunks while newcomers arrive, its
tokens a second, and each prompt size's median time to the newcomer's first token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import ServerProcess, running

STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the "
          "ships she watched over for forty years."}]
SIZES = (30, 300, 1200, 30, 300, 1200)  # newcomers' prompt tokens, roughly


def newcomer_prompt(tokens: int, i: int) -> list[dict[str, str]]:
    text = " ".join(f"word{i}x{j}" for j in range(max(1, tokens // 4)))
    return [{"role": "user", "content": f"Summarize in one line: {text}"}]


async def stream(http: httpx.AsyncClient, messages: list[dict[str, str]], max_tokens: int,
                 times: list[float]) -> float:
    """Streams one chat answer, appending each content chunk's arrival; returns when the
    request was sent."""
    sent = time.perf_counter()
    async with http.stream("POST", "/v1/chat/completions", json={
            "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": True}) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    times.append(time.perf_counter())
    return sent


async def one_round(args: tuple[str, ...]) -> dict[str, float]:
    with running(ServerProcess(("--parallel", "4", *args))) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as http:
            await stream(http, STORY, 4, [])  # warm-up
            by: list[float] = []
            bystander = asyncio.create_task(stream(http, STORY, 400, by))
            while len(by) < 20:
                await asyncio.sleep(0.01)
            window = time.perf_counter()
            ttft: dict[int, list[float]] = {}

            async def newcomer(i: int, size: int) -> None:
                await asyncio.sleep(0.8 * i)
                times: list[float] = []
                sent = await stream(http, newcomer_prompt(size, i), 8, times)
                ttft.setdefault(size, []).append(times[0] - sent if times else float("nan"))

            await asyncio.gather(*(newcomer(i, s) for i, s in enumerate(SIZES)))
            end = time.perf_counter()
            await bystander
    gaps = sorted(b - a for a, b in zip(by, by[1:], strict=False) if window <= b <= end + 0.5)
    out = {"worst_ms": 1000 * gaps[-1], "p99_ms": 1000 * gaps[int(0.99 * (len(gaps) - 1))],
           "tok_s": (len(by) - 1) / (by[-1] - by[0])}
    for size, values in sorted(ttft.items()):
        out[f"ttft_{size}_ms"] = 1000 * statistics.median(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("extra", nargs="*", help="more `tokenpipe serve` flags for both")
    opts = parser.parse_args()
    sides = {"A (--prompt-step-ms 0)": ("--prompt-step-ms", "0", *opts.extra),
             "B (default)": tuple(opts.extra)}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for r in range(opts.rounds):
        for name, flags in sides.items():
            figures = asyncio.run(one_round(flags))
            results[name].append(figures)
            print(f"round {r + 1} {name}: " + ", ".join(
                f"{k} {v:.0f}" for k, v in figures.items()), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} (1 min)")
    for name, runs in results.items():
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        print(f"median {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
