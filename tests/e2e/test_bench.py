"""`tokenpipe bench` against a real server on the fake engine: the load over every API
(tokenpipe.v1 and the HTTP doors), --compare-apis, and the start line that sends every
stream's request in the same loop turn; on the bundled model, tools and --compare-apis."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ServerProcess
from tokenpipe.bench.sse_load import sse_stream
from tokenpipe.bench.streams import StartLine

NOWHERE = "http://127.0.0.1:9"  # refused before any connection: nothing listens there


@pytest.mark.parametrize("api", ["sse", "ws", "anthropic", "responses", "ollama"])
def test_bench_streams_n_clients_and_prints_the_figures(fake_server: ServerProcess,
                                                         api: str) -> None:
    url = fake_server.ws_url if api == "ws" else fake_server.url
    done = subprocess.run(
        [sys.executable, "-m", "tokenpipe", "bench", "--api", api, "--url", url, "-n", "3",
         "--max-tokens", "6", "--prompt", "[[tokens=6]][[pace_ms=2]]", "--rounds", "1",
         "--warmup", "0"], capture_output=True, text=True, timeout=120, check=True)
    line = next(ln for ln in done.stdout.splitlines() if " n=3 " in ln)
    assert "err=0" in line, done.stdout
    found = re.search(r"\((\d+) tokens,", line)
    assert found is not None and int(found.group(1)) == 18, line  # 3 streams x 6 tokens
    assert "server CPU" in done.stdout  # read from the server's /metrics before and after
    assert re.search(r"; RSS \d+ MB", done.stdout), done.stdout  # and its memory after


def test_compare_apis_runs_each_in_turn_and_prints_ratios(fake_server: ServerProcess
                                                          ) -> None:
    """Every door against one server, each once a round, the order rotated (A B C D E, then
    B C D E A: a round's first place measured slower); the medians say each one's tok/s
    against the first's and its first-token time's difference from the first's."""
    apis = ["sse", "anthropic", "responses", "ollama", "ws"]
    done = subprocess.run(
        [sys.executable, "-m", "tokenpipe", "bench", "--compare-apis", ",".join(apis),
         "--url", fake_server.url, "-n", "2", "--max-tokens", "5",
         "--prompt", "[[tokens=5]][[pace_ms=2]]", "--rounds", "2", "--warmup", "0"],
        capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    runs = [ln.split()[0] for ln in lines if " n=2 " in ln]
    order = [*apis, *apis[1:], apis[0]]  # in turn, the second round starting one later
    assert runs == [f"tokenpipe-{a}" for a in order], done.stdout
    assert all("err=0" in ln and "(10 tokens," in ln for ln in lines if " n=2 " in ln)
    medians = lines[lines.index("medians over rounds:") + 1:]
    assert [m.split()[0] for m in medians] == [f"tokenpipe-{a}" for a in apis]
    assert re.search(r"ratio  1\.00x  ttft   \+0\.0 ms$", medians[0]), medians[0]
    for m in medians[1:]:
        assert re.search(r"ratio +\d+\.\d\dx  ttft +[-+]\d+\.\d ms$", m), m


@pytest.mark.parametrize("flags", [["--compare-apis", "sse"], ["--compare-apis", "sse,grpc"],
                                   ["--compare-apis", "sse,sse"]])
def test_compare_apis_refuses_a_list_it_cannot_compare(flags: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "tokenpipe", "bench", "--url", NOWHERE,
                           *flags], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "two or more different APIs" in done.stderr, done.stderr


def test_formats_are_refused_on_the_doors_that_do_not_take_them() -> None:
    done = subprocess.run([sys.executable, "-m", "tokenpipe", "bench", "--api", "ollama",
                           "--url", NOWHERE, "--tools", "scripts/bench/tools.json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "for --api ws and sse only" in done.stderr, done.stderr


async def test_start_line_lets_every_stream_go_together() -> None:
    line = StartLine(3)
    started: list[int] = []

    async def stream(i: int, delay: float) -> None:
        await asyncio.sleep(delay)  # connections ready at different times
        await line.wait()
        started.append(i)

    tasks = [asyncio.create_task(stream(i, d)) for i, d in enumerate((0.0, 0.05, 0.1))]
    await asyncio.sleep(0.07)
    assert started == []  # the first two wait for the third
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert sorted(started) == [0, 1, 2]


async def test_a_stream_that_fails_before_the_line_does_not_hold_the_others() -> None:
    line = StartLine(2)
    waiter = asyncio.create_task(line.wait())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    line.leave()  # the other stream could not connect
    await asyncio.wait_for(waiter, 5)


def _sse_body(*texts: str) -> bytes:
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    events += [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    events.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}})
    sse = b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n"
                   for e in events) + b"data: [DONE]\n\n"
    pieces = [sse[i:i + 7] for i in range(0, len(sse), 7)]  # splits characters and events
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


async def test_sse_load_client_counts_texts_usage_and_errors() -> None:
    status = {"code": 200}
    posts: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"content-length: (\d+)", head, re.I)
                body = await reader.readexactly(int(length.group(1)) if length else 0)
                if head.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                    continue
                posts.append(head + body)
                if status["code"] != 200:
                    writer.write(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\n{}")
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n"
                             + _sse_body("日本", "語 🎉", "def f():\n", "    return 1"))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    args = argparse.Namespace(api_key="k", max_tokens=9, model="m")
    messages = [{"role": "user", "content": "hi"}]
    try:
        result = await sse_stream(url, args, messages, StartLine(1))
        assert (result.error, result.deltas, result.tokens) == (None, 4, 9)
        assert result.ttft > 0 and result.total >= result.ttft
        sent = posts[-1]
        assert sent.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert b"\r\nauthorization: Bearer k\r\n" in sent
        request = json.loads(sent.split(b"\r\n\r\n", 1)[1])
        assert request["model"] == "m" and request["stream"] is True
        assert request["max_tokens"] == 9 and request["messages"] == messages
        status["code"] = 429
        result = await sse_stream(url, args, messages, StartLine(1))
        assert result.error == "http 429"
    finally:
        server.close()
        await server.wait_closed()
    line = StartLine(2)
    result = await sse_stream(url, args, messages, line)  # nothing listens there now
    assert result.error is not None and result.error.startswith("ConnectError")
    assert line.waiting == 1  # it left the start line: the other stream does not wait


def test_the_sse_bench_loads_neither_the_ws_client_nor_pydantic() -> None:
    """The bench shares the cores with the servers it measures: its start-up is theirs too
    (the WebSocket client imports the protocol's pydantic models, about 0.1 s of CPU)."""
    code = ("import sys, atexit\n"
            "atexit.register(lambda: print(sorted(m for m in ('pydantic', 'websockets', "
            "'tokenpipe.client', 'tokenpipe.protocol.ws') if m in sys.modules)))\n"
            "import tokenpipe.bench.sse_load, tokenpipe.bench.streams\n"
            "from tokenpipe.cli import main\n"
            "main(['bench', '--help'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--api {ws,sse,anthropic,responses,ollama}" in done.stdout
    assert done.stdout.splitlines()[-1] == "[]"


@pytest.mark.model
@pytest.mark.parametrize("api", ["sse", "ws"])
def test_bench_tools_runs_calls_beside_free_text_on_the_model(model_server: ServerProcess,
                                                               api: str) -> None:
    """--tools FILE --format-ab on the real model: the tools side is answered with calls
    (tool_choice required, so tokens and a first token arrive), the free side with text."""
    url = model_server.url if api == "sse" else model_server.ws_url
    done = subprocess.run(
        [sys.executable, "-m", "tokenpipe", "bench", "--api", api, "--url", url, "-n", "2",
         "--max-tokens", "40", "--rounds", "1", "--warmup", "0", "--tools",
         "scripts/bench/tools.json", "--format-ab", "--json",
         *(["--same-prompt"] if api == "sse" else [])],  # the free side: the tools' prompt
        capture_output=True, text=True, timeout=300, check=True)
    runs = {r["label"]: r for r in map(json.loads, (
        ln for ln in done.stdout.splitlines() if ln.startswith("{")))}
    assert set(runs) == {f"tokenpipe-{api}-free", f"tokenpipe-{api}-tools"}, done.stdout
    for run in runs.values():
        assert run["errors"] == 0 and run["tokens"] > 0 and run["ttft_p50_ms"] > 0, run


@pytest.mark.model
def test_compare_apis_on_the_model_counts_the_same_tokens_at_every_door(
        model_server: ServerProcess) -> None:
    """Every HTTP door on the real model: the same greedy request, each counted from its
    own usage (completion_tokens, output_tokens, eval_count), gives the same count."""
    apis = ["sse", "anthropic", "responses", "ollama"]
    done = subprocess.run(
        [sys.executable, "-m", "tokenpipe", "bench", "--compare-apis", ",".join(apis),
         "--url", model_server.url, "-n", "1", "--max-tokens", "12", "--rounds", "1",
         "--warmup", "0", "--json"], capture_output=True, text=True, timeout=300, check=True)
    runs = {r["label"]: r for r in map(json.loads, (
        ln for ln in done.stdout.splitlines() if ln.startswith("{")))}
    assert list(runs) == [f"tokenpipe-{a}" for a in apis], done.stdout
    for run in runs.values():
        assert run["errors"] == 0 and run["ttft_p50_ms"] > 0 and run["deltas"] > 0, run
    assert {run["tokens"] for run in runs.values()} == {12}, runs  # the story is longer
