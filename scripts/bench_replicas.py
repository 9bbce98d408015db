"""The chaos benchmark of replicas sharing state (issue 29's figures; docs/benchmarks.md):
Redis, fake-engine upstreams, tokenpipe replicas (`--engine openai --upstream ... --state
redis://...`) behind nginx (round robin, `max_fails=0`), and N resumable greedy streams
from tokenpipe.client through nginx. Prints, for each scenario, how many streams ended
with the uninterrupted answer and the clients' worst waits for a delta.

    .venv/bin/python scripts/bench_replicas.py --streams 100 --tokens 200
    .venv/bin/python scripts/bench_replicas.py --scenario kill      # rolling, upstream

Scenarios: `kill` SIGKILLs one replica mid-stream (its clients reconnect through nginx and
another replica takes their streams over); `rolling` restarts every replica in turn with
SIGTERM during the load; `upstream` SIGKILLs one upstream mid-stream (the replicas go on
with its answers on the other, from their token ids: no client sees it but as a pause).
Needs redis-server and nginx (scripts/setup.sh --test)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tokenpipe.client import Client

PY = sys.executable


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    def __init__(self, cmd: list[str], port: int, log: Path, health: str | None) -> None:
        self.cmd, self.port, self.log, self.health = cmd, port, log, health
        self.proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.cmd[:4]} exited: {self.log.read_text()[-1500:]}")
            if self.health is None:
                return
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.health, timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.cmd[:4]} not ready")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def tokenpipe(port: int, tmp: Path, *args: str) -> Proc:
    return Proc([PY, "-m", "tokenpipe", "serve", "--port", str(port), *args], port,
                tmp / f"tokenpipe-{port}.log", f"http://127.0.0.1:{port}/health")


def nginx(port: int, replicas: list[int], tmp: Path) -> Proc:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=0;" for p in replicas)
    temps = "\n".join(f"  {k}_temp_path {tmp}/{k};"
                      for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = tmp / "nginx.conf"
    conf.write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\nworker_processes 1;\npid {tmp}/nginx.pid;\n"
        f"error_log {tmp}/nginx-error.log;\nevents {{ worker_connections 4096; }}\n"
        f"http {{\n  access_log off;\n{temps}\n"
        f"  upstream tokenpipe {{\n{servers}\n  }}\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n"
        "      proxy_pass http://tokenpipe;\n      proxy_http_version 1.1;\n"
        "      proxy_set_header Upgrade $http_upgrade;\n"
        "      proxy_set_header Connection upgrade;\n      proxy_set_header Host $host;\n"
        "      proxy_connect_timeout 2s;\n"
        "      proxy_buffering off;\n      proxy_read_timeout 3600s;\n    }\n  }\n}\n")
    return Proc([binary, "-p", str(tmp), "-c", str(conf)], port, tmp / "nginx.log",
                f"http://127.0.0.1:{port}/health")


async def stream(url: str, messages: list[dict[str, str]], tokens: int,
                 waits: list[tuple[float, int]], seen: list[list[float]],
                 every: list[list[float]]) -> tuple[str, int]:
    async with Client(url, resume_s=60) as client:
        gen = await client.generate(messages, resumable=True,
                                    params={"max_tokens": tokens, "temperature": 0})
        last = time.monotonic()
        worst = 0.0
        times: list[float] = []
        async for _ in gen:
            now = time.monotonic()
            worst, last = max(worst, now - last), now
            times.append(now)
        waits.append((worst, gen.resumes))
        every.append(times)
        if gen.resumes:
            seen.append(times)
        return gen.text, gen.resumes


def across(times: list[float], killed: float) -> float | None:
    """The client's gap across the kill: its last delta before it to its next one."""
    before = [t for t in times if t <= killed]
    after = [t for t in times if t > killed]
    return after[0] - before[-1] if before and after else None


async def scenario(name: str, args: argparse.Namespace, replicas: list[Proc],
                   ups: list[Proc], front: str, tmp: Path) -> None:
    messages = [{"role": "user",  # the fake script, cycled to --tokens
                 "content": f"[[pace_ms={args.pace_ms}]] [[tokens={args.tokens}]]"}]
    async with Client(front) as client:
        reference = await (await client.generate(
            messages, params={"max_tokens": args.tokens, "temperature": 0})).collect()
    waits: list[tuple[float, int]] = []
    seen: list[list[float]] = []  # each resumed stream's delta times
    every: list[list[float]] = []  # every stream's
    started = time.monotonic()
    runs = [asyncio.create_task(stream(front, messages, args.tokens, waits, seen, every))
            for _ in range(args.streams)]
    await asyncio.sleep(args.tokens * args.pace_ms / 1000 / 3)  # a third in
    killed = time.monotonic()
    if name == "kill":
        await asyncio.to_thread(replicas[0].stop, signal.SIGKILL)
        killed = time.monotonic()  # it is gone: a delta after this came from another
        replicas[0] = tokenpipe(replicas[0].port, tmp, *replicas[0].cmd[6:])
        await asyncio.to_thread(replicas[0].wait)
    elif name == "upstream":
        await asyncio.to_thread(ups[0].stop, signal.SIGKILL)
        killed = time.monotonic()
        ups[0] = tokenpipe(ups[0].port, tmp, *ups[0].cmd[6:])  # back for what follows
        await asyncio.to_thread(ups[0].wait)
    else:
        for i, old in enumerate(list(replicas)):
            await asyncio.to_thread(old.stop, signal.SIGTERM)
            replicas[i] = tokenpipe(old.port, tmp, *old.cmd[6:])
            await asyncio.to_thread(replicas[i].wait)
    results = await asyncio.gather(*runs, return_exceptions=True)
    elapsed = time.monotonic() - started
    equal = sum(1 for r in results if not isinstance(r, BaseException) and r[0] == reference)
    failed = [r for r in results if isinstance(r, BaseException)]
    resumed = [r[1] for r in results if not isinstance(r, BaseException) and r[1]]
    why = sorted({f"{type(f).__name__}: {str(f)[:60]}" for f in failed})
    for r in results:
        if not isinstance(r, BaseException) and r[0] != reference:
            common = next((i for i, (a, b) in enumerate(zip(r[0], reference, strict=False))
                           if a != b), min(len(r[0]), len(reference)))
            print(f"  unequal: {len(r[0])} chars against {len(reference)}, the same for the "
                  f"first {common}; resumed {r[1]} times: {r[0][common - 20:common + 20]!r} "
                  f"against {reference[common - 20:common + 20]!r}")

    def spread(worst: list[float]) -> str:
        if not worst:
            return "none"
        worst.sort()
        p99 = worst[min(len(worst) - 1, int(len(worst) * 0.99))]
        return f"p50 {statistics.median(worst):.2f} s, p99 {p99:.2f} s, max {worst[-1]:.2f} s"

    print(f"{name}: {equal}/{args.streams} streams ({equal / args.streams:.0%}) equal to the "
          f"uninterrupted answer "
          f"({len(failed)} failed: {why}); {len(resumed)} resumed by their client; each "
          f"stream's longest wait for a delta: resumed {spread([w for w, r in waits if r])}"
          f"; the others {spread([w for w, r in waits if not r])}; all done in "
          f"{elapsed:.1f} s")
    if name == "kill":
        gaps = [g for g in (across(t, killed) for t in seen) if g is not None]
        print(f"  the killed replica's clients' gap, last delta before the kill to the next: "
              f"{spread(gaps)} ({len(gaps)} streams)")
    if name == "upstream":  # the streams it served paused; the others did not
        gaps = sorted(g for g in (across(t, killed) for t in every) if g is not None)
        moved = gaps[len(gaps) // 2:]  # about half were on the killed upstream
        print(f"  every client's gap, last delta before the kill to the next: {spread(gaps)}"
              f"; the longer half's (those the kill moved): {spread(moved)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--pace-ms", type=float, default=20)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--upstreams", type=int, default=2)
    parser.add_argument("--scenario", choices=["kill", "rolling", "upstream", "all"], default="all")
    parser.add_argument("--lease-s", type=float, default=3.0, help="--state-lease-s")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tokenpipe-chaos-"))
    procs: list[Proc] = []
    replicas: list[Proc] = []
    ups: list[Proc] = []
    try:
        redis_port = free_port()
        redis = Proc(["redis-server", "--port", str(redis_port), "--save", "",
                      "--appendonly", "no"], redis_port, tmp / "redis.log", None)
        procs.append(redis)
        time.sleep(0.3)
        ups = [tokenpipe(free_port(), tmp, "--engine", "fake", "--parallel", "256",
                         "--max-queue", "1024") for _ in range(args.upstreams)]
        for u in ups:  # a replica whose upstreams are all down at its start never loads
            u.wait()
        upstream = ",".join(f"http://127.0.0.1:{u.port}" for u in ups)
        replicas = [tokenpipe(free_port(), tmp, "--engine", "openai", "--upstream", upstream,
                              "--parallel", "256", "--max-queue", "1024", "--state",
                              f"redis://127.0.0.1:{redis_port}/0", "--shutdown-grace-s", "0.5",
                              "--state-lease-s", str(args.lease_s))
                    for _ in range(args.replicas)]
        for p in replicas:
            p.wait()
        front = nginx(free_port(), [r.port for r in replicas], tmp)
        front.wait()
        procs += [front]
        url = f"ws://127.0.0.1:{front.port}/ws"
        names = (["kill", "rolling", "upstream"] if args.scenario == "all"
                 else [args.scenario])
        print(f"{args.streams} streams of {args.tokens} tokens ({args.pace_ms:g} ms a token), "
              f"{args.replicas} replicas, {args.upstreams} fake upstreams, nginx, Redis, "
              f"lease {args.lease_s:g} s; logs in {tmp}")
        for name in names:
            asyncio.run(scenario(name, args, replicas, ups, url, tmp))
    finally:
        for p in [*replicas, *ups, *reversed(procs)]:
            p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
