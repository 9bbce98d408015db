"""The default server's memory on the real bundled model: the tiered KV cache's shared tier
(the cells of conversations longer than a split stream, ~190 MB) is not resident after
start; it is allocated when a conversation first outgrows its stream, which answers (its
prefill reported from the allocation on), and its memory goes back once it has been unused
for --shared-tier-keep-alive."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.conftest import ServerProcess, running
from tests.e2e.hostile import rss_mb
from tokenpipe.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.model]

# Issue 33 asks for 400 MB after start; this machine measures ~396 MB (2026-12-03,
# docs/benchmarks.md). The bound guards against regressions, with room for another
# machine's allocator and libraries.
AFTER_START_MB = 450.0


def rss_bytes_mb(server: ServerProcess) -> float:
    """VmRSS in MB of 10^6 bytes (the figure the limit is stated in)."""
    return rss_mb(server) * 1024 * 1024 / 1e6


async def test_the_long_conversation_tier_is_allocated_on_demand_and_given_back() -> None:
    with running(ServerProcess(("--shared-tier-keep-alive", "3s"))) as server:
        await asyncio.sleep(1.0)  # after start: nothing more is allocated until a request
        started = rss_bytes_mb(server)
        notes = "Notes on rivers: " + " ".join(f"river{i % 7}" for i in range(700))
        messages = [{"role": "user", "content": notes + "\nSummarize the notes."}]
        async with Client(server.ws_url) as client:
            short = await client.generate([{"role": "user", "content": "Name a colour."}],
                                          params={"max_tokens": 8})
            assert (await short.collect()).strip()
            after_short = rss_bytes_mb(server)
            gen = await client.generate(messages, params={"max_tokens": 16})
            text = await gen.collect()
            assert text.strip()
            prompt = gen.progress[-1][1]
            assert prompt > 1024 and gen.progress[0] == (0, prompt)  # outgrew a stream
            with_tier = rss_bytes_mb(server)
        # the log line follows the free: wait for both (RSS alone raced the line once)
        freed_line = "freed the KV cache's 8192 shared (on demand) tier"
        deadline = time.monotonic() + 60
        while ((freed := rss_bytes_mb(server)) > with_tier - 150
               or freed_line not in server.log()):
            assert time.monotonic() < deadline, (with_tier, freed, server.log())
            await asyncio.sleep(0.25)
        print(f"RSS MB: after start {started:.0f}, after a short answer {after_short:.0f}, "
              f"with the shared tier ({prompt}-token prompt) {with_tier:.0f}, "
              f"after its keep-alive {freed:.0f}")
        assert with_tier - after_short > 150  # the shared tier's 8192 cells, not held before
        assert started <= AFTER_START_MB and after_short <= AFTER_START_MB
