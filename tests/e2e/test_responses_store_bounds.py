"""The Responses store under hostile input, on a real fake-engine server: stored strings no
tokenizer bounds have length limits, a response too big to store is refused before it runs
(the door's 400 naming the field), the store's total stays under its byte cap (the oldest
go), the database has no `-shm` mapping an outside process could truncate into SIGBUS,
a store that cannot write answers in each shape, DELETE forgets one response (later ones
keep their copy), and background runs and followers are capped per client.
Each with a bystander stream beside it (tests/e2e/hostile.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess, running
from tests.e2e.hostile import Bystander, rss_mb

pytestmark = pytest.mark.e2e
ROW_CAP = 64 * 1024
TOTAL_CAP = 400 * 1024


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store") / "responses.sqlite3"


@pytest.fixture(scope="module")
def server(db: Path) -> Iterator[ServerProcess]:
    env = {"TOKENPIPE_RESPONSES_MAX_ROW_BYTES": str(ROW_CAP),
           "TOKENPIPE_RESPONSES_MAX_BYTES": str(TOTAL_CAP)}
    with running(ServerProcess(("--engine", "fake", "--responses-db", str(db)), env)) as s:
        yield s


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # one client a test: each new one builds an SSL context (~40 ms) on the test's loop,
    # where the bystander reads: it would measure the test, not the server
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


def outsider_truncates_shm(db: Path) -> bool:
    """Makes the -shm file empty, as `truncate -s 0` would; whether there was one."""
    shm = Path(str(db) + "-shm")
    existed = shm.exists()
    shm.write_bytes(b"")
    return existed


async def post(http: httpx.AsyncClient, server: ServerProcess,
               body: dict[str, object]) -> httpx.Response:
    return await http.post(server.url + "/v1/responses", json=body)


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi", "user": "u" * 257}, "user"),
    ({"input": [{"role": "user", "content": "hi", "id": "m" * 257}]}, "input"),
    ({"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
                 "id": "f" * 257}]}, "input"),
])
async def test_stored_strings_no_tokenizer_bounds_have_a_length_limit(
        http: httpx.AsyncClient, server: ServerProcess, body: dict[str, object],
        param: str) -> None:
    r = await post(http, server, {"model": "fake", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith(param)


async def test_a_response_too_big_to_store_is_a_400_before_it_runs(
        http: httpx.AsyncClient, server: ServerProcess) -> None:
    bulk = [{"type": "function_call", "call_id": "c1", "name": "f",
             "arguments": '{"x": "' + "a" * ROW_CAP + '"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"role": "user", "content": "[[echo]] go on"}]
    async with Bystander(server.ws_url) as bystander:
        started = time.perf_counter()
        refusals = await asyncio.gather(*(post(http, server, {"model": "fake", "input": bulk})
                                          for _ in range(20)))
        refuse_s = (time.perf_counter() - started) / len(refusals)
    bystander.check()
    for r in refusals:
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "input"
        assert f"over this server's {ROW_CAP}" in error["message"]
    # the same request, not stored, runs: the cap is the store's alone
    r = await post(http, server, {"model": "fake", "input": bulk, "store": False})
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "go on"
    print(f"loaded machine: 20 refusals of {ROW_CAP} B rows, {refuse_s * 1000:.0f} ms each "
          f"(concurrent), bystander worst gap {bystander.worst_stall_s * 1000:.0f} ms")
    assert bystander.worst_stall_s < 0.5


async def test_the_store_keeps_under_its_byte_cap_oldest_first(
        http: httpx.AsyncClient, server: ServerProcess, db: Path) -> None:
    baseline = rss_mb(server)
    text = "[[echo]] " + "b" * (ROW_CAP // 8)  # input and answer: ~ROW_CAP / 4 a row
    ids = []
    async with Bystander(server.ws_url) as bystander:
        for _ in range(40):  # ~40 x ROW_CAP / 4 written: 1.6 x TOTAL_CAP
            r = await post(http, server, {"model": "fake", "input": text})
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])
    bystander.check()
    kept = [(await http.get(f"{server.url}/v1/responses/{i}")).status_code for i in ids]
    assert kept[-1] == 200 and kept[0] == 404
    assert kept == sorted(kept, reverse=True)  # the oldest went, the newest stayed
    assert 0 < kept.count(200) <= TOTAL_CAP // (ROW_CAP // 4)
    on_disk = sum(p.stat().st_size for p in db.parent.iterdir())  # the file and its WAL
    print(f"loaded machine: kept {kept.count(200)} of 40 rows, {on_disk} B on disk, RSS "
          f"{baseline:.0f} -> {rss_mb(server):.0f} MiB, bystander worst gap "
          f"{bystander.worst_stall_s * 1000:.0f} ms")
    assert bystander.worst_stall_s < 0.5


async def test_no_shm_file_to_truncate_and_streams_finish(
        http: httpx.AsyncClient, server: ServerProcess, db: Path) -> None:
    """WAL in EXCLUSIVE locking mode keeps its index in heap memory: no -shm file is mapped.
    An outside process that makes one (empty: as a truncation leaves it) touches nothing."""
    async with Bystander(server.ws_url) as bystander:
        first = await post(http, server, {"model": "fake", "input": "[[echo]] before"})
        assert first.status_code == 200
        assert not await asyncio.to_thread(outsider_truncates_shm, db)  # none was mapped
        streams = [post(http, server, {"model": "fake", "input": f"[[echo]] after {i}",
                                 "stream": True}) for i in range(10)]
        for r in await asyncio.gather(*streams):
            assert r.status_code == 200 and "event: response.completed" in r.text
        got = (await http.get(f"{server.url}/v1/responses/{first.json()['id']}")).json()
        assert got["output"][0]["content"][0]["text"] == "before"
    bystander.check()
    assert server.proc.poll() is None


async def test_delete_forgets_one_response_and_later_ones_keep_their_copy(
        http: httpx.AsyncClient, server: ServerProcess) -> None:
    """DELETE's semantics (docs/protocol.md): the deleted response is gone (GET, continuing
    it: 404), but a response that continued it keeps its own copy of the conversation,
    the deleted text included, and continuing that one still reads it; deleting every
    response of the conversation removes it."""
    async with Bystander(server.ws_url) as bystander:
        first = (await post(http, server, {"model": "fake", "input": "[[echo]] secret"})).json()
        second = (await post(http, server, {"model": "fake", "input": "[[echo]] next",
                                            "previous_response_id": first["id"]})).json()
        gone = await http.delete(f"{server.url}/v1/responses/{first['id']}")
        assert gone.json() == {"id": first["id"], "object": "response.deleted",
                               "deleted": True}
        assert (await http.get(f"{server.url}/v1/responses/{first['id']}")).status_code == 404
        again = await post(http, server, {"model": "fake", "input": "hi",
                                          "previous_response_id": first["id"]})
        assert again.status_code == 404 and again.json()["error"]["param"] == (
            "previous_response_id")
        # the later response: its GET and input_items show only its own turn ...
        items = (await http.get(f"{server.url}/v1/responses/{second['id']}/input_items")).json()
        assert "secret" not in str(items) and "secret" not in str(
            (await http.get(f"{server.url}/v1/responses/{second['id']}")).json())
        # ... but continuing it reads the deleted turns: the same prompt as spelled out
        continued = (await post(http, server, {"model": "fake", "input": "hi", "store": False,
                                               "previous_response_id": second["id"]})).json()
        spelled = (await post(http, server, {"model": "fake", "store": False, "input": [
            {"role": "user", "content": "[[echo]] secret"},
            {"role": "assistant", "content": "secret"},
            {"role": "user", "content": "[[echo]] next"},
            {"role": "assistant", "content": "next"},
            {"role": "user", "content": "hi"}]})).json()
        assert continued["usage"]["input_tokens"] == spelled["usage"]["input_tokens"]
        await http.delete(f"{server.url}/v1/responses/{second['id']}")
        last = await post(http, server, {"model": "fake", "input": "hi",
                                         "previous_response_id": second["id"]})
        assert last.status_code == 404
    bystander.check()


@pytest.fixture(scope="module")
def tight() -> Iterator[ServerProcess]:
    """A store whose per-response cap a long answer passes (the input alone does not):
    the store cannot write those answers, a real write failure to answer for."""
    env = {"TOKENPIPE_RESPONSES_MAX_ROW_BYTES": "3000"}
    with running(ServerProcess(("--engine", "fake"), env)) as s:
        yield s


async def health(http: httpx.AsyncClient, server: ServerProcess) -> dict[str, Any]:
    r = await http.get(server.url + "/health")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


async def test_a_store_that_cannot_write_answers_in_each_shape(
        http: httpx.AsyncClient, tight: ServerProcess) -> None:
    long = {"model": "fake", "input": "[[tokens=800]]",
            "max_output_tokens": 1000}
    async with Bystander(tight.ws_url) as bystander:
        whole = await post(http, tight, long)  # the door's error shape, whole
        assert whole.status_code == 500, whole.text
        error = whole.json()["error"]
        assert "could not store response" in error["message"] and "3000" in error["message"]
        assert set(error) == {"message", "type", "param", "code"}
        status = await health(http, tight)  # degraded, with the reason; models still serve
        assert status["status"] == "degraded" and "could not store" in status["store"]
        streamed = await post(http, tight, {**long, "stream": True})  # an error, then the end
        assert streamed.status_code == 200
        kinds = [line[len("event: "):] for line in streamed.text.splitlines()
                 if line.startswith("event: ")]
        assert kinds[-2:] == ["error", "response.failed"], kinds[-4:]
        background = await post(http, tight, {**long, "background": True})
        rid = background.json()["id"]
        deadline = time.monotonic() + 30
        while (got := (await http.get(f"{tight.url}/v1/responses/{rid}")).json())[
                "status"] in ("queued", "in_progress"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert got["status"] == "failed", got
        assert "could not store" in got["error"]["message"]
        ok = await post(http, tight, {"model": "fake", "input": "[[echo]] short"})
        assert ok.status_code == 200  # a good write clears the store's failure
        assert (await health(http, tight))["status"] == "ok"
    bystander.check()
    assert tight.proc.poll() is None


@pytest.fixture(scope="module")
def capped() -> Iterator[ServerProcess]:
    env = {"TOKENPIPE_MAX_BACKGROUND_PER_CLIENT": "3", "TOKENPIPE_MAX_FOLLOWERS_PER_CLIENT": "4"}
    with running(ServerProcess(("--engine", "fake"), env)) as s:
        yield s


async def test_background_runs_are_capped_per_client(
        http: httpx.AsyncClient, capped: ServerProcess) -> None:
    slow = {"model": "fake", "input": "[[pace_ms=50]][[tokens=200]]", "background": True}
    async with Bystander(capped.ws_url) as bystander:
        ids = [(await post(http, capped, slow)).json()["id"] for _ in range(3)]
        started = time.perf_counter()
        refused = await post(http, capped, slow)
        refuse_ms = (time.perf_counter() - started) * 1000
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "3 background responses running" in refused.json()["error"]["message"]
        # the client's other requests still run, and a cancelled run frees its place
        assert (await post(http, capped, {"model": "fake", "input": "hi"})).status_code == 200
        cancelled = await http.post(f"{capped.url}/v1/responses/{ids[0]}/cancel")
        assert cancelled.json()["status"] == "cancelled"
        again = await post(http, capped, slow)
        assert again.status_code == 200, again.text
        for rid in [*ids[1:], again.json()["id"]]:
            await http.post(f"{capped.url}/v1/responses/{rid}/cancel")
    bystander.check()
    print(f"loaded machine: the 4th background run refused in {refuse_ms:.1f} ms, bystander "
          f"worst gap {bystander.worst_stall_s * 1000:.0f} ms")


async def test_followers_are_capped_per_client(http: httpx.AsyncClient,
                                               capped: ServerProcess) -> None:
    """A background response's GET streams and resumable streams' GET /v1/streams count
    together against one client address's followers (4 here): the 5th is a 429 in OpenAI's
    shape, another address still follows, and a follower that ends gives its place back."""
    slow = {"model": "fake", "input": "[[pace_ms=50]][[tokens=300]]", "background": True}
    rid = (await post(http, capped, slow)).json()["id"]
    ask = [{"role": "user", "content": "[[pace_ms=50]][[tokens=80]]"}]
    async with http.stream("POST", capped.url + "/v1/chat/completions", json={
            "model": "fake", "messages": ask, "stream": True, "resumable": True}) as chat:
        token = chat.headers["x-stream-token"]  # left at once: it runs on, resumable
    follow = f"{capped.url}/v1/responses/{rid}?stream=true"
    async with Bystander(capped.ws_url) as bystander, contextlib.AsyncExitStack() as held:
        for _ in range(3):
            r = await held.enter_async_context(http.stream("GET", follow))
            assert r.status_code == 200
        r = await held.enter_async_context(http.stream("GET", f"{capped.url}/v1/streams/{token}"))
        assert r.status_code == 200  # the 4th: a resumable stream's reader
        for url in (follow, f"{capped.url}/v1/streams/{token}"):
            started = time.perf_counter()
            refused = await http.get(url)
            refuse_ms = (time.perf_counter() - started) * 1000
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            error = refused.json()["error"]
            assert "follows 4 streams" in error["message"], error
        other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(transport=other, timeout=60) as elsewhere, \
                elsewhere.stream("GET", follow) as r:
            assert r.status_code == 200, "another client address has its own places"
        await held.aclose()  # the four leave: their places come back once the server
        deadline = time.monotonic() + 10  # has seen them go (it reads each disconnect)
        while True:
            async with http.stream("GET", follow) as r:
                if r.status_code == 200:
                    async for line in r.aiter_lines():
                        if "response.output_text.delta" in line:
                            break
                    break
            assert r.status_code == 429 and time.monotonic() < deadline, r.status_code
            await asyncio.sleep(0.05)
    await http.post(f"{capped.url}/v1/responses/{rid}/cancel")
    bystander.check()
    print(f"loaded machine: the 5th follower refused in {refuse_ms:.1f} ms, bystander worst "
          f"gap {bystander.worst_stall_s * 1000:.0f} ms")
