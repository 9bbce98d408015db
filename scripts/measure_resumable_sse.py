"""What a resumable Chat Completions stream costs next to a plain one.

Against a running server (`tokenpipe serve --engine fake --parallel 16`): rounds of 8
concurrent streams of 200 fake tokens, plain and with `X-Resumable: 1` alternated, after
two warm-up rounds; prints each side's median wall time per round and the server's CPU
time per SSE event over all its rounds (`process_cpu_seconds_total` on /metrics around
each round: it ticks in 10 ms, so one round alone cannot tell a few µs per event).

    .venv/bin/python scripts/measure_resumable_sse.py http://127.0.0.1:8000 [--rounds 12]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time

import httpx

BODY = {"messages": [{"role": "user", "content": "[[tokens=200]]"}], "stream": True,
        "max_tokens": 200}
SIDES = {"plain": {}, "resumable": {"X-Resumable": "1"}}


async def _cpu(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    found = re.search(r"^process_cpu_seconds_total (\S+)", text, re.M)
    assert found, "no process_cpu_seconds_total on /metrics"
    return float(found.group(1))


async def _stream(client: httpx.AsyncClient, headers: dict[str, str]) -> int:
    events = 0
    async with client.stream("POST", "/v1/chat/completions", json=BODY,
                             headers=headers) as response:
        async for line in response.aiter_lines():
            events += line.startswith("data:")
    return events


async def _round(client: httpx.AsyncClient,
                 headers: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, server CPU seconds, events) of 8 concurrent streams."""
    cpu, start = await _cpu(client), time.perf_counter()
    counts = await asyncio.gather(*(_stream(client, headers) for _ in range(8)))
    wall = time.perf_counter() - start
    return wall, await _cpu(client) - cpu, sum(counts)


async def main(url: str, rounds: int) -> None:
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in SIDES}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for _ in range(2):
            await _round(client, {})
        for _ in range(rounds):
            for name, headers in SIDES.items():
                runs[name].append(await _round(client, headers))
    for name, results in runs.items():
        wall = statistics.median(r[0] for r in results) * 1000
        cpu = sum(r[1] for r in results) / sum(r[2] for r in results) * 1e6
        print(f"{name:10s} wall p50 {wall:.1f} ms, server CPU {cpu:.1f} us per event")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.rounds))
