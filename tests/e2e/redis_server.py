"""Debian's redis-server in the tests: a process on a free port without persistence
(`scripts/setup.sh --test` installs it), stopped and started again on the same port
where a test takes Redis away; the same wait_ready/stop as tests.conftest.ServerProcess."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import redis

from tests.conftest import LOGS, free_port


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"redis-{self.port}.log"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--logfile", str(self.log_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}:\n"
                                   f"{self.log_path.read_text(errors='replace')[-2000:]}")
            try:
                with self.client() as c:
                    c.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
