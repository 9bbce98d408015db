"""llama.cpp's llama-server as an upstream in the tests: where `scripts/setup.sh --test`
builds it (scripts/build-llama-server.sh; LLAMA_SERVER overrides), and a process on a free
port serving the bundled model."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.conftest import LOGS, THREADS, free_port


def llama_server_path() -> Path:
    """The binary set-up builds for the installed llama-cpp-python (its vendored llama.cpp)."""
    if os.environ.get("LLAMA_SERVER"):
        return Path(os.environ["LLAMA_SERVER"])
    version = importlib.metadata.version("llama-cpp-python")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tokenpipe" / f"llama-server-{version}" / "llama-server"


class LlamaServer:
    """`llama-server -m <bundled model> -t 2 -c CTX -np N` on a free port; the same
    url/log/stop as tests.conftest.ServerProcess."""

    def __init__(self, *, ctx_size: int = 8192, parallel: int = 8,
                 extra: tuple[str, ...] = ()) -> None:
        from tokenpipe.engines.base import bundled_model_path

        binary = llama_server_path()
        # After `scripts/setup.sh --test` the binary is there: missing is a failure.
        assert binary.is_file(), (
            f"llama-server not found at {binary}: `scripts/setup.sh --test` builds it "
            "(scripts/build-llama-server.sh), or set LLAMA_SERVER to a built one")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"llama-server-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [str(binary), "-m", str(bundled_model_path()), "-t", str(THREADS), "-c", str(ctx_size),
             "-np", str(parallel), "--host", "127.0.0.1", "--port", str(self.port), *extra],
            stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}:\n"
                                   f"{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"llama-server not ready after {timeout} s:\n{self.log()}")
            time.sleep(0.2)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
