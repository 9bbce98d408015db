"""Every door's streaming before and after a change: two servers side by side, one running
an older commit's source (a git worktree), one this checkout's, the same engine; each
round runs `tokenpipe bench --compare-apis` against both in turn (A B, B A, ...), and the
medians per door give the after/before ratios of tokens/s and server CPU per delta.

    .venv/bin/python scripts/bench_before_after.py /tmp/before --engine fake \\
        --prompt "[[tokens=2000]]" --max-tokens 2000 -n 8 --rounds 4
    .venv/bin/python scripts/bench_before_after.py /tmp/before --max-tokens 128 -n 1

BEFORE is a checkout of the older commit (`git worktree add --detach DIR COMMIT`); both
servers run in this venv, the older one with PYTHONPATH=BEFORE/src."""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

APIS = "ws,sse,anthropic,responses,ollama"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(src: Path, engine: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen([sys.executable, "-m", "tokenpipe", "serve", "--port", str(port),
                             *engine], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server of {src} did not start")
        time.sleep(0.2)


def bench(port: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One --compare-apis run on the server at port: each door's summary."""
    runs: dict[str, dict[str, float]] = {}
    out = subprocess.run([sys.executable, "-m", "tokenpipe", "bench", "--url",
                          f"http://127.0.0.1:{port}", "--compare-apis", args.apis,
                          "-n", str(args.n), "--max-tokens", str(args.max_tokens),
                          "--prompt", args.prompt, "--rounds", "1", "--warmup", "0",
                          "--json"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            runs[row["label"].removeprefix("tokenpipe-")] = row
    return runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path, help="a checkout of the older commit")
    p.add_argument("--engine", default="fake", help="fake or llamacpp (the bundled model)")
    p.add_argument("--apis", default=APIS)
    p.add_argument("-n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=2000)
    p.add_argument("--prompt", default="[[tokens=2000]]")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    engine = ["--engine", args.engine, "--parallel", "16"]
    here = Path(__file__).resolve().parent.parent / "src"
    servers = {"before": serve(args.before / "src", engine), "after": serve(here, engine)}
    results: dict[str, dict[str, list[dict[str, float]]]] = {"before": {}, "after": {}}
    try:
        for r in range(args.rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for side in order:
                for api, row in bench(servers[side][1], args).items():
                    results[side].setdefault(api, []).append(row)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)

    def median(side: str, api: str, key: str) -> float:
        values = [row[key] for row in results[side].get(api, []) if row.get(key) is not None]
        return statistics.median(values) if values else float("nan")

    print(f"{args.engine}, {args.n} streams of {args.max_tokens} tokens, {args.rounds} rounds "
          "(medians): after/before")
    print(f"{'door':12s} {'tok/s before':>13s} {'after':>9s} {'ratio':>6s}   "
          f"{'us/delta before':>15s} {'after':>7s} {'ratio':>6s}")
    for api in args.apis.split(","):
        tb, ta = median("before", api, "aggregate_tok_s"), median("after", api, "aggregate_tok_s")
        cb = median("before", api, "server_us_per_delta")
        ca = median("after", api, "server_us_per_delta")
        print(f"{api:12s} {tb:13.0f} {ta:9.0f} {ta / tb:6.2f}x   {cb:15.1f} {ca:7.1f} "
              f"{ca / cb:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
