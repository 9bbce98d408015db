"""tokenpipe -> vllm-router -> two vLLM workers, by the router's policy (issue 29's figure;
docs/benchmarks.md): a multi-turn chat workload through tokenpipe (`--engine openai
--upstream <router>`), once per policy, printing the share of prompt tokens vLLM found in
its prefix cache (`usage.prompt_tokens_details.cached_tokens`), the time to first token and
the tokens/s the clients saw.

    .venv/bin/python scripts/bench_vllm_router.py                     # starts two vLLM
    .venv/bin/python scripts/bench_vllm_router.py --workers http://a:8000 http://b:8000

Needs vLLM's CPU build and vllm-router (scripts/vllm_setup.sh, into ~/.cache/tokenpipe/vllm;
TOKENPIPE_VLLM_HOME overrides). Without --workers it starts two `vllm serve` on the bundled
model as the tests do (tests/e2e/vllm_server.py), about a minute. Each policy's run opens
conversations of its own (a run-specific first line), so one run's cache does not serve
the next.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

MODEL = "smollm2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_home() -> Path:
    if os.environ.get("TOKENPIPE_VLLM_HOME"):
        return Path(os.environ["TOKENPIPE_VLLM_HOME"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tokenpipe" / "vllm"


class Proc:
    """A process group on a port, ready when GET url+ready answers 200."""

    def __init__(self, cmd: list[str], port: int, logs: Path, name: str,
                 env: dict[str, str] | None = None) -> None:
        self.url, self.name = f"http://127.0.0.1:{port}", name
        self.log = logs / f"{name}-{port}.log"
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, start_new_session=True)
        self.started = time.monotonic()

    def wait(self, timeout: float = 600) -> float:
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.monotonic() - self.started
            if time.monotonic() - self.started > timeout:
                raise SystemExit(f"{self.name} not ready after {timeout} s")
            time.sleep(0.5)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def vllm(logs: Path) -> Proc:
    """`vllm serve` as tests/e2e/vllm_server.py starts it."""
    home, port = vllm_home(), free_port()
    return Proc([str(home / "venv/bin/vllm"), "serve", str(home / "model"),
                 "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
                 "--max-model-len", "4096", "--max-num-seqs", "8", "--dtype", "float32",
                 "--enforce-eager", "--enable-prefix-caching", "--enable-prompt-tokens-details",
                 "--enable-scale-out", "--seed", "0"], port, logs, "vllm",
                {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                 "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                 "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})


@contextlib.contextmanager
def stopping(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            proc.stop()


@dataclass
class Turn:
    prompt: int
    cached: int
    completion: int
    ttft_s: float
    decode_s: float  # first token to the end


async def ask(http: httpx.AsyncClient, url: str, messages: list[dict[str, str]],
              max_tokens: int) -> tuple[str, Turn]:
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    usage: dict[str, object] = {}
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", ()):
                piece = choice["delta"].get("content")
                if piece:
                    first = first or time.perf_counter()
                    text.append(piece)
    ended = time.perf_counter()
    details = usage.get("prompt_tokens_details") or {}
    assert first is not None and isinstance(details, dict)
    return "".join(text), Turn(int(usage["prompt_tokens"]),  # type: ignore[call-overload]
                               int(details.get("cached_tokens") or 0),
                               int(usage["completion_tokens"]),  # type: ignore[call-overload]
                               first - started, ended - first)


async def conversation(http: httpx.AsyncClient, url: str, run: str, n: int, turns: int,
                       max_tokens: int) -> list[Turn]:
    """A chat of `turns` turns: a first message of about 200 tokens (vLLM's CPU cache keeps
    whole blocks of 128), then short follow-ups, each turn sent with the whole history."""
    topic = ("lighthouses", "bees", "volcanoes", "glaciers", "comets", "forests", "rivers",
             "deserts")[n % 8]
    first = f"Conversation {run}-{n}. Tell me about {topic}. " + " ".join(
        f"Question {i}: what else should I know about {topic}?" for i in range(14))
    messages = [{"role": "user", "content": first}]
    done = []
    for _ in range(turns):
        text, turn = await ask(http, url, messages, max_tokens)
        done.append(turn)
        messages += [{"role": "assistant", "content": text},
                     {"role": "user", "content": f"Tell me more about {topic}."}]
    return done


async def workload(url: str, run: str, conversations: int, turns: int,
                   max_tokens: int) -> tuple[list[list[Turn]], float]:
    async with httpx.AsyncClient(timeout=300) as http:
        started = time.perf_counter()
        chats = await asyncio.gather(*(conversation(http, url, run, n, turns, max_tokens)
                                       for n in range(conversations)))
        return chats, time.perf_counter() - started


def served(worker: str) -> int:
    """Requests a vLLM finished (its Prometheus counter, summed over finish reasons)."""
    text = httpx.get(worker + "/metrics", timeout=10).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("vllm:request_success_total{")))


def report(policy: str, chats: list[list[Turn]], wall_s: float, spread: list[int]) -> None:
    turns = [t for chat in chats for t in chat]
    later = [t for chat in chats for t in chat[1:]]

    def share(ts: list[Turn]) -> float:
        return sum(t.cached for t in ts) / max(1, sum(t.prompt for t in ts))

    ttft = sorted(t.ttft_s * 1000 for t in turns)
    p95 = ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))]
    rates = [(t.completion - 1) / t.decode_s for t in turns if t.decode_s > 0]
    total = sum(t.completion for t in turns)
    print(f"{policy:12} {len(turns):4} requests  cached share {share(turns):5.2f} "
          f"(turns 2+: {share(later):4.2f})  TTFT p50 {statistics.median(ttft):6.0f} ms "
          f"p95 {p95:6.0f} ms  per stream {statistics.median(rates):5.1f} tok/s  "
          f"all {total / wall_s:5.1f} tok/s  per worker {spread}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", nargs="+", help="vLLM URLs (default: start two)")
    parser.add_argument("--policies", nargs="+", default=["cache_aware", "round_robin"])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    home = vllm_home()
    if not (home / "installed").is_file():
        raise SystemExit(f"vLLM is not installed in {home}: run scripts/vllm_setup.sh")
    logs = Path(tempfile.mkdtemp(prefix="bench-vllm-router-"))
    print(f"logs in {logs}", flush=True)
    started: list[Proc] = []
    with contextlib.ExitStack() as stack:
        workers = args.workers
        if not workers:
            started = [vllm(logs), vllm(logs)]
            stack.enter_context(stopping(*started))
            ready = max(p.wait() for p in started)
            print(f"two vLLM ready after {ready:.0f} s", flush=True)
            workers = [p.url for p in started]
        print(f"{args.conversations} conversations at once, {args.turns} turns each, "
              f"{args.max_tokens} tokens an answer, greedy; through tokenpipe", flush=True)
        for policy in args.policies:
            port = free_port()
            router = Proc([str(home / "venv/bin/vllm-router"), "--host", "127.0.0.1",
                           "--port", str(port), "--prometheus-port", str(free_port()),
                           "--policy", policy, "--worker-urls", *workers],
                          port, logs, f"router-{policy}")
            port = free_port()
            front = Proc([sys.executable, "-m", "tokenpipe", "serve", "--port", str(port),
                          "--engine", "openai", "--upstream", router.url, "--parallel", "16"],
                         port, logs, f"tokenpipe-{policy}")
            with stopping(front, router):
                router.wait(60)
                front.wait(60)
                run = f"{policy}-{time.time_ns() % 10**6}"
                before = [served(w) for w in workers]
                chats, wall_s = asyncio.run(workload(front.url, run, args.conversations,
                                                     args.turns, args.max_tokens))
                report(policy, chats, wall_s,
                       [served(w) - b for w, b in zip(workers, before, strict=True)])


if __name__ == "__main__":
    main()
