"""What loading on demand costs the first request, and what it costs later ones.

Starts two real servers on the bundled model, one after the other: A loads it at start, B
with --load-on-demand. Prints the model's own load time (B's log line "loaded in X s"),
B's first request's time to first token (the load included), then the time to first token
of later requests on A and on B, alternated A B A B (the same greedy request).

    .venv/bin/python scripts/measure_load_on_demand.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import ServerProcess

from tokenpipe.client import Client

USER = [{"role": "user", "content": "Name three colours."}]
ARGS = ("--model", "smollm2", "--parallel", "1", "--ctx-size", "2048")


async def ttft_ms(url: str) -> float:
    async with Client(url) as client:
        started = time.perf_counter()
        gen = await client.generate(USER, params={"max_tokens": 4})
        async for _ in gen:
            first = time.perf_counter()
            break
        await gen.collect()
    return (first - started) * 1000


def load_seconds(log: str) -> float:
    found = re.search(r"loaded in ([0-9.]+) s", log)
    assert found, log
    return float(found.group(1))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    rounds = parser.parse_args().rounds
    preloaded = ServerProcess(ARGS)
    on_demand = ServerProcess((*ARGS, "--load-on-demand"))
    try:
        preloaded.wait_ready()
        on_demand.wait_ready()
        first = await ttft_ms(on_demand.ws_url)
        load = load_seconds(on_demand.log())
        a: list[float] = []
        b: list[float] = []
        for _ in range(rounds):
            a.append(await ttft_ms(preloaded.ws_url))
            b.append(await ttft_ms(on_demand.ws_url))
    finally:
        preloaded.stop()
        on_demand.stop()
    print(f"model load (B's log): {load * 1000:.0f} ms")
    print(f"B first request TTFT (load included): {first:.0f} ms "
          f"= load + {first - load * 1000:.0f} ms")
    print(f"later requests TTFT, median of {rounds} (A B A B): preloaded A "
          f"{statistics.median(a):.1f} ms, on-demand B {statistics.median(b):.1f} ms "
          f"(B/A {statistics.median(b) / statistics.median(a):.2f})")
    print("A:", " ".join(f"{x:.1f}" for x in a))
    print("B:", " ".join(f"{x:.1f}" for x in b))


if __name__ == "__main__":
    asyncio.run(main())
