"""Shared fixtures: real servers on free ports (STYLE.md item 11), never in-process fakes."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx
import pytest
from hypothesis import settings as hypothesis_settings

# No per-example deadline: the suite shares 2 cores with servers and a browser, and a slow
# example is not a wrong one. `--hypothesis-profile quick` (scripts/test.sh --quick) tries
# fewer examples; the full suite tries hypothesis' default number.
hypothesis_settings.register_profile("default", deadline=None)
hypothesis_settings.register_profile("quick", deadline=None, max_examples=25)
hypothesis_settings.load_profile("default")

ROOT = Path(__file__).resolve().parent.parent
# Modules that load the bundled GGUF through transformers (~10 s of CPU, once a session
# per worker, transformers_loads_once): run by one pytest-xdist worker together.
TRANSFORMERS_GROUP = {
    "tests/test_engine_contract.py", "tests/test_sampling_contract.py",
    "tests/test_thinking_budget_contract.py", "tests/unit/engines/test_chat_template.py",
    "tests/unit/engines/test_prefill.py", "tests/unit/engines/test_recovery.py",
    "tests/unit/engines/test_transformers.py"}
LOGS = ROOT / "tests" / "e2e" / "artifacts"
# Decode threads of the engines the tests run: both cores when the suite runs alone; one on
# each pytest-xdist worker (scripts/test.sh), so that two workers decoding at once never
# oversubscribe the cores (llama.cpp's threads wait for each other at every op). Servers and
# tools the tests start get it through TOKENPIPE_THREADS.
THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
if THREADS == 1:
    os.environ.setdefault("TOKENPIPE_THREADS", "1")


class _Closable(Protocol):
    def close(self) -> object: ...


C = TypeVar("C", bound=_Closable)
_OPEN: list[_Closable] = []


def closed_after_test(client: C) -> C:
    """An official client (openai, anthropic, ollama) closed when the test ends: one left
    to the garbage collector closes its socket inside a later test, which filterwarnings
    "error" then fails (PytestUnraisableExceptionWarning). Not for a module's fixture:
    that one yields from `with client:`."""
    _OPEN.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


class _Stoppable(Protocol):
    def wait_ready(self, timeout: float = ...) -> None: ...
    def stop(self) -> object: ...


S = TypeVar("S", bound=_Stoppable)


@contextlib.contextmanager
def running(server: S) -> Iterator[S]:
    """Waits until the server is ready; stops it however the block ends."""
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


async def close_after_texts(stream: AsyncIterator[Any], texts: int = 3) -> None:
    """Reads an engine stream until `texts` EngineText events, then closes it early."""
    from tokenpipe.types import EngineText

    seen = 0
    async for event in stream:
        if isinstance(event, EngineText):
            seen += 1
            if seen == texts:
                break
    await stream.aclose()  # type: ignore[attr-defined]


async def begun(client: Any, messages: list[dict[str, Any]], deltas: int,
                **params: Any) -> tuple[Any, str, int]:
    """A resumable generation on a tokenpipe.client connection, read until `deltas` deltas:
    (the generation, its stream token, the last seq seen)."""
    gen = await client.generate(messages, resumable=True, params=params)
    async for _ in gen:
        if len(gen.deltas) >= deltas:
            break
    assert gen.start is not None
    return gen, gen.start["stream"], gen.deltas[-1]["seq"]


async def drop_and_resume(ws_url: str, max_tokens: int = 40, *,
                          resume_url: str | None = None) -> tuple[Any, Any, str]:
    """Starts a resumable, paced fake-engine generation, leaves after two deltas, resumes it
    on a new connection (to `resume_url`: another replica) and reads it to the end:
    (first generation, resumed one, text)."""
    from tokenpipe.client import Client

    async with Client(ws_url) as first:
        gen, token, seen = await begun(first, [{"role": "user", "content": "[[pace_ms=20]]"}],
                                       2, max_tokens=max_tokens)
    async with Client(resume_url or ws_url) as second:  # a new connection
        resumed = await second.resume(token, seen, "again")
        rest = await resumed.collect()
    return gen, resumed, "".join(d["text"] for d in gen.deltas) + rest


def chat(text: str, **params: object) -> Any:
    """A one-message chat request with the given sampling params (engine-level tests)."""
    from tokenpipe.types import GenerationRequest, Message, SamplingParams

    return GenerationRequest(messages=(Message("user", text),),
                             params=SamplingParams(**params))  # type: ignore[arg-type]


def broken_model() -> str:
    """A file that `--model` accepts (it exists) and the engine cannot load: its load fails
    after the server listens (a path that does not exist is refused before)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    path = LOGS / "broken-model.gguf"
    path.write_bytes(b"not a GGUF file\n")
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, args: tuple[str, ...], env: dict[str, str] | None = None, *,
                 port: int | None = None) -> None:
        self.args, self.env = args, env
        self.port = port or free_port()  # a port: the same replica again, after a restart
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/ws"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"server-{self.port}.log"
        self._log = self.log_path.open("ab" if port else "wb")
        cmd = [sys.executable, "-m", "tokenpipe", "serve", "--port", str(self.port), *args]
        # stored Responses in the test logs, not the user's data directory (a test that
        # restarts a server on one store passes --responses-db, which wins)
        store = {"TOKENPIPE_RESPONSES_DB": str(LOGS / f"responses-{self.port}.sqlite3")}
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **store, **(env or {})})

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"server not ready after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def live_server() -> Iterator[Callable[..., str]]:
    """live_server(*serve_args) -> base URL of a real `tokenpipe serve` on a free port."""
    servers: list[ServerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> str:
        server = ServerProcess(args, env)
        servers.append(server)
        server.wait_ready()
        return server.url

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def fake_server() -> Iterator[ServerProcess]:
    """One fake-engine server shared by the protocol tests."""
    with running(ServerProcess(("--engine", "fake", "--max-streams-per-connection", "8"))
                 ) as server:
        yield server


@pytest.fixture(scope="session")
def model_server() -> Iterator[ServerProcess]:
    """One server on the real default model (llama.cpp, bundled SmolLM2), for the whole
    session. Its KV cache is split (2048 tokens a sequence): its tests compare answers
    across requests on one long-lived server, which only split streams promise bit for bit
    for every length (docs/determinism.md, "The KV cache's layout"); the tiered default
    has servers of its own (test_ws_model's whole context, the page's context test) and
    engine tests (tests/unit/engines/test_llamacpp_kv.py)."""
    if not os.environ.get("CI"):  # in CI a missing model is a failure, not a skip
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
    with running(ServerProcess(("--parallel", "4", "--ctx-size", "8192",
                                "--kv-cache", "split"))) as server:
        yield server


@pytest.fixture(scope="session")
def vllm_servers() -> Iterator[tuple[Any, Any]]:
    """Two `vllm serve` (vLLM's CPU build, bundled model) for the whole session, started
    together (about a minute: tests/e2e/vllm_server.py): every vLLM test shares them, the
    router's tests use both. Skips with TOKENPIPE_TEST_VLLM=0; not installed: a failure in
    CI, a skip outside it."""
    from tests.e2e.vllm_server import VllmServer

    with contextlib.ExitStack() as stack:
        servers = []
        for _ in range(2):
            servers.append(VllmServer())
            stack.callback(servers[-1].stop)
        for server in servers:
            server.wait_ready()
        print(f"vLLM: two servers ready after {max(s.ready_after_s or 0 for s in servers):.0f} s")
        LEAVING[group_of("tests/e2e/test_vllm.py")] = stack.close
        yield servers[0], servers[1]


class _LoadedOnce:
    """Stands in for a transformers Auto class: from_pretrained with the same arguments
    loads once, then hands out `give(the loaded object)`."""

    def __init__(self, real: Any, give: Callable[[Any], Any]) -> None:
        self._real, self._give, self._loaded = real, give, {}

    def from_pretrained(self, source: str, **kwargs: Any) -> Any:
        key = (source, repr(sorted(kwargs.items())))
        if key not in self._loaded:  # a load that raises is not kept: the next one retries
            self._loaded[key] = self._real.from_pretrained(source, **kwargs)
        return self._give(self._loaded[key])


@pytest.fixture(scope="session")
def transformers_loads_once() -> Iterator[None]:
    """The in-process transformers engines load the bundled GGUF once a session, not once a
    module (~10 s each: transformers parses and de-quantizes the GGUF in Python). Each
    engine still runs its own load() (path, device, dtype, threads, errors) and its own
    decode thread; only from_pretrained is remembered: every engine gets its own copy of
    the tokenizer (--chat-template sets it), and one model, whose weights inference only
    reads. An argument never loaded before (a bad path) goes to the real from_pretrained."""
    if not os.environ.get("CI"):
        pytest.importorskip("transformers", reason="the transformers extra is not installed")
    from tokenpipe.engines.transformers import loading

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loading, "AutoTokenizer", _LoadedOnce(loading.AutoTokenizer,
                                                            copy.deepcopy))
        patch.setattr(loading, "AutoModelForCausalLM",
                      _LoadedOnce(loading.AutoModelForCausalLM, lambda model: model))
        yield


# Modules that one pytest-xdist worker runs together (scripts/test.sh): those that load the
# bundled GGUF through transformers (transformers_loads_once) and those that share the
# session's two vLLM (vllm_servers); every other module is a group of its own, so its
# module-scoped servers start once.
GROUPS = {**dict.fromkeys(TRANSFORMERS_GROUP, "transformers"),
          "tests/e2e/test_vllm.py": "vllm", "tests/e2e/test_upstream_contract.py": "vllm"}
# The groups that take longest, longest first (a quiet 3-worker run's times, 2026-12-03:
# 320 s for the transformers group down to 25 s), so that no long one is left to run alone
# at the end; the rest follow in file order.
FIRST = ("transformers", "tests/e2e/test_wheel_install.py", "vllm",
         "tests/unit/engines/test_llamacpp_kv.py", "tests/e2e/test_replicas.py",
         "tests/e2e/test_hostile_http.py", "tests/e2e/test_web_ui_reload.py",
         "tests/e2e/test_forced_calls.py", "tests/e2e/test_web_ui_context.py",
         "tests/e2e/test_web_ui.py", "tests/e2e/test_web_ui_chat.py",
         "tests/e2e/test_client_schemas.py", "tests/e2e/test_logprobs.py",
         "tests/e2e/test_embeddings.py", "tests/e2e/test_web_ui_progress.py",
         "tests/e2e/test_web_ui_parts.py", "tests/e2e/test_schemathesis.py",
         "tests/e2e/test_web_ui_keyboard.py", "tests/e2e/test_hostile_ws.py",
         "tests/e2e/test_memory.py", "tests/e2e/test_replicas_partition.py",
         "tests/e2e/test_fuzz_and_soak.py", "tests/e2e/test_responses_store_bounds.py",
         "tests/e2e/test_hostile_schemas.py", "tests/unit/engines/test_llamacpp_speculate.py")


def group_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return GROUPS.get(module, module)


# What a group's last test closes: a session fixture shared by one group only (the vLLM
# servers idle at about a tenth of a core and hold 5 GB while the rest of the suite runs).
LEAVING: dict[str, Callable[[], None]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test of a group on this worker (its tests run together, in one
    worker: pytest_xdist_make_scheduler), closes what that group registered in LEAVING."""
    try:
        return (yield)
    finally:
        group = group_of(item.nodeid)
        if group in LEAVING and (nextitem is None or group_of(nextitem.nodeid) != group):
            LEAVING.pop(group)()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The groups in FIRST run first, each group's tests together (the same order on every
    pytest-xdist worker, as xdist requires; a serial run keeps each module whole too)."""
    rank: dict[str, int] = {group: i for i, group in enumerate(FIRST)}
    for item in items:
        rank.setdefault(group_of(item.nodeid), len(rank))
    items.sort(key=lambda item: rank[group_of(item.nodeid)])


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist hands out whole groups (group_of), in collection order. Its own
    `--dist loadgroup` cannot: it renames items to mark their group, which pytest 9.2's
    node ids no longer take."""
    from xdist.scheduler import LoadScopeScheduling

    if config.getvalue("dist") not in ("load", "loadgroup", "loadscope", "loadfile"):
        return None  # --dist each, worksteal: xdist's own

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # FIRST, not the number of tests, orders them
    return ByGroup(config, log)
