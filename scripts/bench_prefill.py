"""A long prompt's prefill (issue 33 item 1: "prefill at least as fast as llama-server's"):
the time to the first token of one streamed chat answer whose prompt is about --tokens
tokens, on tokenpipe (`serve`, default settings: the prompt outgrows a split stream, so the
shared tier opens for it; and with `--determinism fast`) and on llama-server (`-c 8192
-np 1`, the same GGUF and threads), A B C A B C, one server at a time, a new prompt every
round (no cache to reuse).

    python scripts/bench_prefill.py [--tokens 4600] [--rounds 2] [--threads 2]

Prints each run's time to first token and prefill rate (prompt tokens / TTFT, the
server's own count), and the medians' ratio."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def prompt(tokens: int, salt: int) -> str:
    """About `tokens` tokens of varied text (SmolLM2's tokenizer: ~10.7 tokens a phrase)."""
    words = [f"item{(i * 7919 + salt) % 1000} is near stone {i % 37}," for i in range(
        tokens * 3 // 32)]
    return f"Round {salt}. Notes: " + " ".join(words) + "\nSummarize the notes in one line."


def ttft(url: str, text: str) -> tuple[float, int]:
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    body = {"model": model, "stream": True, "max_tokens": 2, "temperature": 0,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": text}]}
    started = time.perf_counter()
    first, used = None, 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if first is None and choices and choices[0].get("delta", {}).get("content"):
                first = time.perf_counter() - started
            if chunk.get("usage"):
                used = int(chunk["usage"]["prompt_tokens"])
    assert first is not None, "no text came"
    return first, used


def start(cmd: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"{cmd[0]} did not come up")


def main() -> None:
    from scripts.bench_speculate import free_port
    from tests.e2e.llama_server import llama_server_path

    from tokenpipe.engines.base import bundled_model_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4600)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    t = str(args.threads)
    systems = {
        "tokenpipe": [sys.executable, "-m", "tokenpipe", "serve", "--threads", t,
                      "--log-level", "warning"],
        "tokenpipe fast": [sys.executable, "-m", "tokenpipe", "serve", "--threads", t,
                           "--log-level", "warning", "--determinism", "fast"],
        "llama-server": [str(llama_server_path()), "-m", str(bundled_model_path()), "-t", t,
                         "-c", "8192", "-np", "1"],
    }
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    for r in range(args.rounds):
        for name, cmd in systems.items():
            port = free_port()
            proc = start(cmd, port)
            try:
                took, used = ttft(f"http://127.0.0.1:{port}", prompt(args.tokens, 100 * r + 7))
            finally:
                proc.terminate()
                proc.wait(30)
            seconds[name].append(took)
            print(f"round {r + 1} {name:13s} first token after {took:6.2f} s, "
                  f"{used} prompt tokens: {used / took:6.1f} tok/s", flush=True)
    base = statistics.median(seconds["llama-server"])
    for name in systems:
        mine = statistics.median(seconds[name])
        print(f"{name:13s} median time to first token {mine:6.2f} s: prefill "
              f"{base / mine:.2f}x llama-server's")


if __name__ == "__main__":
    main()
