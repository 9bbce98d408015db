"""`tokenpipe bench` against a real server on the fake engine: the load over both APIs,
and the start line that sends every stream's request in the same loop turn."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest

from tokenpipe.bench import StartLine

from tests.conftest import ServerProcess


@pytest.mark.parametrize("api", ["sse", "ws"])
def test_bench_streams_n_clients_and_prints_the_figures(fake_server: ServerProcess,
                                                         api: str) -> None:
    url = fake_server.url if api == "sse" else fake_server.ws_url
    done = subprocess.run(
        [sys.executable, "-m", "tokenpipe", "bench", "--api", api, "--url", url, "-n", "3",
         "--max-tokens", "6", "--prompt", "[[tokens=6]][[pace_ms=2]]", "--rounds", "1",
         "--warmup", "0"], capture_output=True, text=True, timeout=120, check=True)
    line = next(ln for ln in done.stdout.splitlines() if " n=3 " in ln)
    assert "err=0" in line, done.stdout
    found = re.search(r"\((\d+) tokens,", line)
    assert found is not None and int(found.group(1)) == 18, line  # 3 streams x 6 tokens


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
