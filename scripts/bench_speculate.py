"""Speculative decoding (issue 33): one stream, greedy, on an input-grounded workload
(answers that copy from the prompt) and on free text, for tokenpipe plain, tokenpipe
`--speculate ngram` (adaptive, and `always`), tokenpipe `--speculate draft` with a draft
model (adaptive, and `always`; --draft-model, default the bundled model drafting for itself)
and llama-server plain and with its own n-gram speculation (`--spec-type ngram-simple`),
A B A B.

    python scripts/bench_speculate.py --rounds 2 --max-tokens 128 [--threads 2]
    python scripts/bench_speculate.py --only tokenpipe "tokenpipe draft" \
        "tokenpipe draft always" [--draft-model PATH]
    python scripts/bench_speculate.py --price      # llama_decode of w rows of one sequence

Each system is a server of its own, started for its turn and stopped after it (never two
decoding at once), with the bundled model, the same threads, one stream. Every prompt
(scripts/bench/speculate.json) is sent once a round through /v1/chat/completions, streamed;
a prompt's rate is its tokens after the first over the time from the first to the last.
It prints each system's median rate per workload, its ratio to tokenpipe plain, the rate
over all its answers together (tokens over time: drafts make some answers much faster than
others), the drafts
and their acceptance, and how many answers equal tokenpipe plain's (llama-server's to its
own plain answers). --price loads the engine in-process and times one llama_decode of w
rows of one sequence against one row (what verifying w - 1 drafted tokens costs)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = json.loads((ROOT / "scripts" / "bench" / "speculate.json").read_text())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def systems(threads: int, draft_model: str | None = None) -> dict[str, list[str]]:
    sys.path.insert(0, str(ROOT))
    from tests.e2e.llama_server import llama_server_path

    from tokenpipe.engines.base import bundled_model_path

    serve = [sys.executable, "-m", "tokenpipe", "serve", "--threads", str(threads),
             "--parallel", "1", "--ctx-size", "4096", "--kv-cache", "split"]
    llama = [str(llama_server_path()), "-m", str(bundled_model_path()), "-t", str(threads),
             "-c", "4096", "-np", "1"]
    draft = [*serve, "--speculate", "draft", "--draft-model",
             draft_model or str(bundled_model_path())]
    return {
        "tokenpipe": serve,
        "tokenpipe ngram": [*serve, "--speculate", "ngram"],
        "tokenpipe ngram always": [*serve, "--speculate", "ngram", "--speculate-policy",
                                   "always"],
        "tokenpipe draft": draft,
        "tokenpipe draft always": [*draft, "--speculate-policy", "always"],
        "llama-server": llama,
        "llama-server ngram": [*llama, "--spec-type", "ngram-simple"],
    }


class Server:
    def __init__(self, cmd: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        port_args = (["--port", str(self.port)] if "tokenpipe" in cmd
                     else ["--host", "127.0.0.1", "--port", str(self.port)])
        self.proc = subprocess.Popen([*cmd, *port_args], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{cmd[0]} did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def ask(url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One streamed greedy answer: its text, tokens, decode rate, drafted and accepted."""
    body = {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    text, stamps, usage, timings = [], [], None, None
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: {r.status_code} {r.read().decode()[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            timings = chunk.get("timings") or timings  # llama-server's
            for choice in chunk.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    text.append(piece)
                    stamps.append(time.perf_counter())
    tokens = (usage or {}).get("completion_tokens", len(stamps))
    details = (usage or {}).get("completion_tokens_details") or {}
    accepted = details.get("accepted_prediction_tokens", 0)
    drafted = accepted + details.get("rejected_prediction_tokens", 0)
    if timings:
        drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
    span = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    return {"text": "".join(text), "tokens": tokens, "drafted": drafted, "accepted": accepted,
            "rate": (tokens - 1) / span if span > 0 else 0.0, "span": span}


def bench(args: argparse.Namespace) -> None:
    table = systems(args.threads, args.draft_model)
    names = [n for n in table if not args.only or n in args.only]
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:  # A B A B ... B A
            server = Server(table[name])
            try:
                ask(server.url, "Hello", 8)  # warm-up
                for workload in ("grounded", "free"):
                    for prompt in PROMPTS[workload]:
                        got.setdefault((name, workload), []).append(
                            ask(server.url, prompt, args.max_tokens))
            finally:
                server.stop()
            print(f"round {round_ + 1}: {name} done", file=sys.stderr)
    load = os.getloadavg()[0]
    print(f"one stream, greedy, {args.max_tokens} tokens at most, {args.threads} threads, "
          f"{args.rounds} rounds, load average {load:.1f} at the end")
    for workload in ("grounded", "free"):
        base = statistics.median(r["rate"] for r in got[("tokenpipe", workload)])
        plain = {"tokenpipe": got[("tokenpipe", workload)],
                 "llama-server": got.get(("llama-server", workload), [])}
        print(f"\n{workload} ({len(PROMPTS[workload])} prompts):")
        for name in names:
            runs = got[(name, workload)]
            rate = statistics.median(r["rate"] for r in runs)
            drafted = sum(r["drafted"] for r in runs)
            accepted = sum(r["accepted"] for r in runs)
            tokens = sum(r["tokens"] for r in runs)
            own = plain["llama-server" if name.startswith("llama") else "tokenpipe"]
            same = sum(a["text"] == b["text"] for a, b in zip(runs, own, strict=False))
            share = f"{accepted / drafted:.2f}" if drafted else "-"
            whole = (sum(r["tokens"] - 1 for r in runs) / sum(r["span"] for r in runs))
            print(f"  {name:24s} {rate:6.1f} tok/s  {rate / base:4.2f}x  (all answers "
                  f"{whole:6.1f} tok/s)  {tokens:5d} tokens"
                  f"  drafted {drafted:5d} accepted {accepted:5d} ({share})"
                  f"  same answer {same}/{len(runs)}")


def price(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from tokenpipe.engines.base import EngineOptions, bundled_model_path
    from tokenpipe.engines.llamacpp import LlamaCppEngine

    path = args.model or str(bundled_model_path())
    widths = [1, 2, 3, 4, 5, 7, 9]
    for determinism in ("exact", "fast"):
        options = EngineOptions(model=path, threads=args.threads, parallel=1,
                                context_size=4096).with_values(determinism=determinism)
        times = LlamaCppEngine.time_verify_steps(options, widths, rounds=args.rounds * 3)
        one = statistics.median(times[1])
        print(f"{determinism}: llama_decode of w rows of one sequence at position 256, "
              f"{Path(path).name}, {args.threads} threads, load {os.getloadavg()[0]:.1f}")
        for w in widths:
            t = statistics.median(times[w])
            print(f"  w={w}  {t * 1000:7.2f} ms  {t / one:5.2f}x one row  (break-even: "
                  f"{t / one:4.2f} tokens a step, {max(0.0, t / one - 1):4.2f} of "
                  f"{w - 1} drafts accepted)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*", help="systems to run (default: all)")
    ap.add_argument("--price", action="store_true", help="time w rows against one, only")
    ap.add_argument("--model", help="--price: a GGUF other than the bundled model")
    ap.add_argument("--draft-model", help="the tokenpipe draft systems' draft model "
                    "(default: the bundled model, drafting for itself)")
    args = ap.parse_args()
    price(args) if args.price else bench(args)


if __name__ == "__main__":
    main()
