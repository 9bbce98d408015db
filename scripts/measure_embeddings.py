"""Embeddings on the bundled model (issue 30 item 3): inputs/s for a batch of short inputs on
tokenpipe and on llama-server's /v1/embeddings (the same GGUF, the same threads, last-token
pooling on both), and the worst gap of a stream tokenpipe serves meanwhile.

    python scripts/measure_embeddings.py [--src src] [--inputs 256] [--rounds 3]

Starts `tokenpipe serve` from `--src` and `llama-server --embeddings --pooling last`
(where `scripts/setup.sh --test` builds it, or LLAMA_SERVER) on free ports, each with 2
threads. Rounds alternate between the two; each round is one request of all the inputs
(`encoding_format: base64`). The bystander: a streamed chat answer on tokenpipe (greedy,
400 tokens, one after another) while the inputs embed; its worst gap between chunks then,
beside its worst gap alone. llama-server started with --embeddings serves embeddings only,
so it has no bystander figure. Also printed: the lowest cosine between the two servers'
vectors for the same input (the same pooling)."""

from __future__ import annotations

import argparse
import base64
import importlib.metadata
import itertools
import math
import os
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

MODEL = "SmolLM2-135M-Instruct"


def llama_server_path() -> Path:
    """Where `scripts/setup.sh --test` builds llama-server (as tests/e2e/llama_server.py
    finds it), or LLAMA_SERVER."""
    if os.environ.get("LLAMA_SERVER"):
        return Path(os.environ["LLAMA_SERVER"])
    version = importlib.metadata.version("llama-cpp-python")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tokenpipe" / f"llama-server-{version}" / "llama-server"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(cmd: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes],
                                                                       str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*cmd, "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{cmd[0]} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


def vectors(body: dict[str, Any]) -> list[list[float]]:
    out = []
    for item in sorted(body["data"], key=lambda d: d["index"]):
        raw = base64.b64decode(item["embedding"])
        out.append(list(struct.unpack(f"<{len(raw) // 4}f", raw)))
    return out


def embed(url: str, texts: list[str]) -> tuple[float, list[list[float]]]:
    began = time.perf_counter()
    r = httpx.post(url + "/v1/embeddings", json={"input": texts, "model": MODEL,
                                                 "encoding_format": "base64"}, timeout=600)
    spent = time.perf_counter() - began
    r.raise_for_status()
    return spent, vectors(r.json())


class Bystander:
    """Streams greedy chat answers one after another until stopped, noting each chunk's
    arrival time."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.streams: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        body = {"model": MODEL, "stream": True, "max_tokens": 400, "temperature": 0,
                "messages": [{"role": "user", "content": "Tell me a long story."}]}
        while not self._stop.is_set():
            self.streams.append([])
            with httpx.stream("POST", self.url + "/v1/chat/completions", json=body,
                              timeout=300) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        self.streams[-1].append(time.perf_counter())

    def __enter__(self) -> Bystander:
        self._thread.start()
        while not (self.streams and len(self.streams[0]) >= 5):
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def worst_gap(self, start: float, end: float) -> tuple[float, int]:
        """The longest wait for a chunk between start and end, and the chunks then."""
        gaps = [b - a for times in self.streams for a, b in itertools.pairwise(times)
                if start <= b and a <= end]
        chunks = sum(start <= t <= end for times in self.streams for t in times)
        return max(gaps), chunks


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default="src")
    parser.add_argument("--inputs", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--llama-arg", action="append", default=[],
                        help="one more llama-server argument (e.g. --llama-arg=--poll "
                             "--llama-arg=0: its threads do not spin between steps)")
    args = parser.parse_args()
    from tokenpipe.engines.base import bundled_model_path

    texts = [f"Short input number {i} about topic {i % 7}." for i in range(args.inputs)]
    env = {**os.environ, "PYTHONPATH": str(Path(args.src).resolve())}
    ours, ours_url = start([sys.executable, "-m", "tokenpipe", "serve", "--threads", "2",
                            "--parallel", "4"], env)
    theirs, theirs_url = start([str(llama_server_path()), "-m", str(bundled_model_path()),
                                "-t", "2", "-c", "8192", "-np", "8", "--embeddings",
                                "--pooling", "last", "--host", "127.0.0.1",
                                *args.llama_arg])
    try:
        embed(ours_url, texts[:8])  # warm-up: the embedding context, the caches
        embed(theirs_url, texts[:8])
        times: dict[str, list[float]] = {"tokenpipe": [], "llama-server": []}
        got: dict[str, list[list[float]]] = {}
        for _ in range(args.rounds):
            for name, url in (("tokenpipe", ours_url), ("llama-server", theirs_url)):
                spent, got[name] = embed(url, texts)
                times[name].append(spent)
        for name, rounds in times.items():
            median = statistics.median(rounds)
            print(f"{name}: {args.inputs} inputs in {median:.2f} s median of "
                  f"{len(rounds)} ({args.inputs / median:.0f} inputs/s; best "
                  f"{args.inputs / min(rounds):.0f} inputs/s; rounds "
                  f"{', '.join(f'{r:.2f}' for r in rounds)} s)")
        lowest = min(cosine(a, b) for a, b in zip(got["tokenpipe"], got["llama-server"],
                                                   strict=True))
        print(f"load average {os.getloadavg()[0]:.1f} (1 min)")
        print(f"lowest cosine between the two servers' vectors: {lowest:.6f}")
        alone_s = statistics.median(times["tokenpipe"])  # as long as an embedding takes
        with Bystander(ours_url) as alone:
            began = time.perf_counter()
            time.sleep(alone_s)
            solo_gap, solo_chunks = alone.worst_gap(began, began + alone_s)
        print(f"bystander alone for {alone_s:.1f} s: worst gap {solo_gap * 1000:.0f} ms "
              f"({solo_chunks / alone_s:.0f} chunks/s)")
        for _ in range(args.rounds):
            with Bystander(ours_url) as beside:
                began = time.perf_counter()
                spent, _ = embed(ours_url, texts)
                gap, chunks = beside.worst_gap(began, began + spent)
            print(f"bystander while {args.inputs} inputs embed ({spent:.2f} s): worst gap "
                  f"{gap * 1000:.0f} ms, {chunks} chunks meanwhile "
                  f"({chunks / spent:.0f} chunks/s); load average "
                  f"{os.getloadavg()[0]:.1f}")
    finally:
        for proc in (ours, theirs):
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
