"""`n` choices against n separate requests of the same prompt, A B A B, on a running server.

    python scripts/bench_choices.py --url http://127.0.0.1:8000 -n 4 --rounds 4

Each round sends one request with `n` choices, then `n` separate requests at once (the
same prompt, seeds seed+i: the same answers), each with a prompt no cache holds (a fresh
tag), and reports the wall time of each, the server's prompt tokens copied
(tokenpipe_prompt_tokens_shared_total) and the completion tokens. Bounded: rounds x 2
requests, a timeout each.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time

import httpx

PROMPT = ("Tag {tag}. You are a careful assistant. Answer in one short paragraph, plainly, "
          "without lists. " + "The sea is wide, the sky is high, and the shore is long. " * 12
          + "Question: why does the sea look blue from the shore?")


def shared(client: httpx.Client, url: str) -> float:
    for line in client.get(url + "/metrics").text.splitlines():
        if line.startswith("tokenpipe_prompt_tokens_shared_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def one(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> int:
    r = await client.post(url + "/v1/chat/completions", json=body, timeout=300)
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


async def run(url: str, n: int, max_tokens: int, together: bool) -> tuple[float, int]:
    body = {"messages": [{"role": "user", "content": PROMPT.format(tag=secrets.token_hex(6))}],
            "max_tokens": max_tokens, "temperature": 0.8, "seed": 1}
    async with httpx.AsyncClient() as client:
        start = time.perf_counter()
        if together:
            tokens = await one(client, url, {**body, "n": n})
        else:
            tokens = sum(await asyncio.gather(*(one(client, url, {**body, "seed": 1 + i})
                                                for i in range(n))))
        return time.perf_counter() - start, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"n": [], "separate": []}
    with httpx.Client() as sync:
        for _ in range(args.rounds):
            for kind in ("n", "separate"):
                before = shared(sync, args.url)
                wall, tokens = asyncio.run(run(args.url, args.n, args.max_tokens,
                                               kind == "n"))
                times[kind].append(wall)
                print(f"{kind:9} {wall * 1000:8.0f} ms  {tokens} completion tokens  "
                      f"{shared(sync, args.url) - before:.0f} prompt tokens copied")
    a, b = statistics.median(times["n"]), statistics.median(times["separate"])
    print(f"median: n={args.n} {a * 1000:.0f} ms, {args.n} separate {b * 1000:.0f} ms, "
          f"ratio {b / a:.2f}x")


if __name__ == "__main__":
    main()
