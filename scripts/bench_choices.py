"""`n` choices against n separate requests of the same prompt, A B A B, on a running server.

    python scripts/bench_choices.py --url http://127.0.0.1:8000 -n 4 --rounds 4

Each round sends one request with `n` choices, then `n` separate requests of one prompt at
once (seeds seed+i), then `n` separate requests of n different prompts of the same length;
every prompt is one no cache holds (a fresh tag). It reports the wall time of each, the
server's prompt tokens copied (tokenpipe_prompt_tokens_shared_total) and the completion
tokens. Bounded: rounds x 3 runs, a timeout per request.
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


def ask(max_tokens: int, seed: int) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": PROMPT.format(tag=secrets.token_hex(6))}],
            "max_tokens": max_tokens, "temperature": 0.8, "seed": seed}


async def run(url: str, n: int, max_tokens: int, kind: str) -> tuple[float, int]:
    """kind n: one request with n choices; separate: n requests of one prompt at once;
    unshared: n requests at once, each its own prompt of the same length (nothing to share:
    what the prompt costs n times)."""
    body = ask(max_tokens, 1)
    async with httpx.AsyncClient() as client:
        start = time.perf_counter()
        if kind == "n":
            tokens = await one(client, url, {**body, "n": n})
        else:
            bodies = [{**body, "seed": 1 + i} if kind == "separate" else ask(max_tokens, 1 + i)
                      for i in range(n)]
            tokens = sum(await asyncio.gather(*(one(client, url, b) for b in bodies)))
        return time.perf_counter() - start, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"n": [], "separate": [], "unshared": []}
    with httpx.Client() as sync:
        for _ in range(args.rounds):
            for kind in times:
                before = shared(sync, args.url)
                wall, tokens = asyncio.run(run(args.url, args.n, args.max_tokens, kind))
                times[kind].append(wall)
                print(f"{kind:9} {wall * 1000:8.0f} ms  {tokens} completion tokens  "
                      f"{shared(sync, args.url) - before:.0f} prompt tokens copied")
    a, b, c = (statistics.median(times[k]) for k in ("n", "separate", "unshared"))
    print(f"median: n={args.n} {a * 1000:.0f} ms; {args.n} separate, one prompt "
          f"{b * 1000:.0f} ms ({b / a:.2f}x); {args.n} separate prompts {c * 1000:.0f} ms "
          f"({c / a:.2f}x)")


if __name__ == "__main__":
    main()
