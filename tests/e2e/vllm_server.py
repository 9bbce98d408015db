"""vLLM's CPU build and vLLM's router in the tests: where `scripts/vllm_setup.sh` installs
them (~/.cache/tokenpipe/vllm; TOKENPIPE_VLLM_HOME overrides), `vllm serve` on the bundled
model (written there as a Hugging Face folder) and `vllm-router` on free ports; the same
url/wait_ready/log/stop as tests.conftest.ServerProcess.

vLLM starts in about 70 s here with --enforce-eager (no torch.compile warm-up: about 3
minutes more on 2 cores), so the suite starts one for the whole session (tests/conftest.py
`vllm_server`). TOKENPIPE_TEST_VLLM=0 leaves vLLM out of set-up and the tests skip, saying
so; otherwise a vLLM that is not installed fails in CI and skips outside it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import LOGS, free_port

MODEL_NAME = "smollm2"  # --served-model-name
CONTEXT = 4096  # --max-model-len


def vllm_home() -> Path:
    if os.environ.get("TOKENPIPE_VLLM_HOME"):
        return Path(os.environ["TOKENPIPE_VLLM_HOME"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tokenpipe" / "vllm"


def require_vllm() -> Path:
    """The set-up's folder; skips (TOKENPIPE_TEST_VLLM=0, or not installed outside CI) or
    fails (not installed in CI)."""
    if os.environ.get("TOKENPIPE_TEST_VLLM") == "0":
        pytest.skip("TOKENPIPE_TEST_VLLM=0: vLLM is left out")
    home = vllm_home()
    if not (home / "installed").is_file():
        message = (f"vLLM is not installed in {home}: scripts/setup.sh --test installs it "
                   "(scripts/vllm_setup.sh), or set TOKENPIPE_TEST_VLLM=0 to leave it out")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return home


class _Process:
    """A process group on a free port, logged to tests/e2e/artifacts."""

    name = "process"
    ready_path = "/health"

    def __init__(self, port: int, args: list[str], env: dict[str, str]) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{self.name}-{self.port}.log"
        self._log = self.log_path.open("wb")
        self.started = time.monotonic()
        self.ready_after_s: float | None = None
        # its own session: vLLM runs its engine in child processes, stopped with it
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **env}, start_new_session=True)

    def wait_ready(self, timeout: float = 600.0) -> None:
        deadline = self.started + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                                   f"{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    self.ready_after_s = time.monotonic() - self.started
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready after {timeout} s:\n{self.log()}")
            time.sleep(0.5)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):  # its engine's children too
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()
        return self.proc.returncode


class VllmServer(_Process):
    """`vllm serve` on the bundled model: float32 (the GGUF's dequantized values exactly;
    bfloat16 answers drifted from one prefill length to another, so a continued greedy
    answer did not equal the uninterrupted one), eager, one decode thread, prefix caching
    and its count in usage (`prompt_tokens_details.cached_tokens`), and the render
    endpoints vllm-router asks for the prompt's tokens (403 without --enable-scale-out:
    the router then routes by text)."""

    name = "vllm"

    def __init__(self, *extra: str) -> None:
        home, port = require_vllm(), free_port()
        super().__init__(port, [
            str(home / "venv" / "bin" / "vllm"), "serve", str(home / "model"),
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", str(CONTEXT), "--max-num-seqs", "8", "--dtype", "float32",
            "--enforce-eager", "--enable-prefix-caching", "--enable-prompt-tokens-details",
            # /v1/chat/completions/render: vllm-router's cache_aware routes by its tokens
            "--enable-scale-out", "--seed", "0", *extra],
            {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
             # no pinning to core 0: the suite's other servers share both cores
             "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
             "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})


class VllmRouter(_Process):
    """`vllm-router --policy POLICY --worker-urls ...` (its Prometheus exporter on a free
    port too: the default 29000 is taken by the second router on a machine)."""

    name = "vllm-router"

    def __init__(self, workers: list[str], policy: str) -> None:
        home, port = require_vllm(), free_port()
        super().__init__(port, [
            str(home / "venv" / "bin" / "vllm-router"), "--host", "127.0.0.1", "--port",
            str(port), "--prometheus-port", str(free_port()), "--policy", policy,
            "--worker-urls", *workers], {})
