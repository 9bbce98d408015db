"""What the chat page's pre-send check costs: POST /v1/messages/count_tokens round trips.

The page counts the conversation with the draft before every send, edit and regenerate (and
while typing, debounced), so a send waits for one count. Starts a real server on the bundled
model (`--parallel 2 --ctx-size 2048`) and times 20 counts (after one warm-up) of a short
and of a long conversation, one client, one connection.

    .venv/bin/python scripts/measure_count_tokens.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import ServerProcess, running

SENTENCE = "Tokens fill the context of this small model one sentence at a time, and then more. "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    rounds = min(max(parser.parse_args().rounds, 1), 200)
    with running(ServerProcess(("--parallel", "2", "--ctx-size", "2048"))) as server, \
            httpx.Client(timeout=30) as client:
        for label, repeats in (("short", 1), ("long", 50)):
            body = {"system": "Be brief.", "messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": SENTENCE * repeats}]}
            times: list[float] = []
            tokens = 0
            for _ in range(rounds + 1):
                start = time.perf_counter()
                response = client.post(f"{server.url}/v1/messages/count_tokens", json=body)
                times.append((time.perf_counter() - start) * 1000)
                tokens = response.raise_for_status().json()["input_tokens"]
            times = times[1:]
            print(f"{label}: {tokens} tokens, median {statistics.median(times):.1f} ms, "
                  f"max {max(times):.1f} ms over {rounds}")


if __name__ == "__main__":
    main()
