"""Resumable Chat Completions SSE, the gateway's own behaviour on the fake engine (where
timing is controlled): the grace period's end cancels an unresumed stream; a second
reader takes a stream over (as tokenpipe.v1's resume does) and so does a v1 resume; a
reconnect with exactly the headers a browser's EventSource sends; a failure mid-stream;
every refusal in OpenAI's shape; a request that does not opt in has no ids and no token.
One server with an API key, so the GET is checked against the POST's key rules."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.conftest import ServerProcess, running
from tests.e2e.sse_reader import Sse, drop_after, events, ids, text_of
from tokenpipe.client import Client

pytestmark = pytest.mark.e2e
KEY = "sekrit"
GRACE_S = 1.0
AUTH = {"Authorization": f"Bearer {KEY}"}


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "stream": True, **extra}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running(ServerProcess(("--engine", "fake", "--api-key", KEY,
                                "--resume-grace-s", str(GRACE_S)))) as s:
        yield s


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client:
        yield client


def reference(http: httpx.Client, content: str) -> str:
    with http.stream("POST", "/v1/chat/completions", json=chat(content)) as response:
        return text_of(events(response.iter_lines()))


def cancellations(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    found = re.findall(r"^tokenpipe_cancellations_total(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert "# TYPE tokenpipe_cancellations_total counter" in text, "no cancellations counter"
    return sum(map(float, found))  # over the `api` label (no series before the first)


def test_the_grace_period_ending_cancels_an_unresumed_stream(http: httpx.Client) -> None:
    before = cancellations(http)
    body = chat("[[pace_ms=50]]", resumable=True, max_tokens=2000)  # 100 s if left alone
    token, seen = drop_after(http, "/v1/chat/completions", body, 3)
    assert ids(seen) == [0, 1, 2]
    time.sleep(GRACE_S / 2)  # within the grace period: still kept, still running
    with http.stream("GET", f"/v1/streams/{token}", headers={"Last-Event-ID": "2"}
                     ) as response:
        assert response.status_code == 200
        more = events(response.iter_lines(), 2)
    left = time.monotonic()  # its last reader left: the grace period starts again
    assert ids(more) == [3, 4] and text_of(more)
    while cancellations(http) == before and time.monotonic() < left + GRACE_S + 10:
        time.sleep(0.05)  # /metrics, not the stream: a GET would take it over again
    cancelled_after = time.monotonic() - left
    assert cancellations(http) == before + 1  # cancelled, not left running
    assert cancelled_after >= GRACE_S * 0.9, cancelled_after  # not before its grace ended
    response = http.get(f"/v1/streams/{token}")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "stream_not_found" and error["type"] == "invalid_request_error"
    print(f"cancelled {cancelled_after:.2f} s after its last reader left (grace {GRACE_S} s)")


def test_a_second_reader_takes_the_stream_over(http: httpx.Client) -> None:
    content = "[[pace_ms=20]][[tokens=30]]"
    expected = reference(http, content)
    with http.stream("POST", "/v1/chat/completions", json=chat(content, resumable=True)
                     ) as first:
        token = first.headers["x-stream-token"]
        lines = first.iter_lines()
        before = events(lines, 4)
        with http.stream("GET", f"/v1/streams/{token}",
                         headers={"Last-Event-ID": before[-1].id or ""}) as second:
            assert second.status_code == 200
            assert second.headers["x-stream-token"] == token
            ended = events(lines)  # the first reader hears it was taken over, and ends
            rest = events(second.iter_lines())
    assert ended and ended[-1].id is None and ended[-1].json["error"]["code"] == "moved"
    assert all(e.data != "[DONE]" for e in ended)
    # what the first reader was sent before the take-over follows on from what it read
    assert ids(ended) == list(range(4, 4 + len(ended) - 1))
    assert ids(before) + ids(rest) == list(range(len(before) + len(rest) - 1))  # [DONE]: none
    assert text_of(before) + text_of(rest) == expected
    assert rest[-1].data == "[DONE]"


def test_a_v1_resume_takes_an_sse_reader_over(server: ServerProcess,
                                              http: httpx.Client) -> None:
    content = "[[pace_ms=20]][[tokens=30]]"
    expected = reference(http, content)

    async def resume(token: str, after_seq: int) -> tuple[str, str]:
        async with Client(server.ws_url, api_key=KEY) as v1:
            gen = await v1.resume(token, after_seq, "r")
            return await gen.collect(), gen.end["finish_reason"] if gen.end else ""

    with http.stream("POST", "/v1/chat/completions", json=chat(content, resumable=True)
                     ) as sse:
        token = sse.headers["x-stream-token"]
        lines = sse.iter_lines()
        before = events(lines, 3)  # ids 0, 1, 2: the deltas of seq 0 and 1
        rest, reason = asyncio.run(resume(token, int(before[-1].id or 0) - 1))
        ended = events(lines)
    assert ended[-1].json["error"]["code"] == "moved"
    assert reason == "stop"
    assert text_of(before) + rest == expected


def test_a_reconnect_with_the_headers_eventsource_sends(http: httpx.Client) -> None:
    content = "[[pace_ms=10]][[tokens=20]]"
    expected = reference(http, content)
    token, seen = drop_after(http, "/v1/chat/completions", chat(content), 3,
                             headers={"X-Resumable": "1"})
    # what Chrome and Firefox send on an EventSource's reconnection (and the key: a page
    # reading with fetch sends it; EventSource itself cannot, see docs/protocol.md)
    browser = {"Accept": "text/event-stream", "Cache-Control": "no-cache",
               "Last-Event-ID": seen[-1].id or ""}
    with http.stream("GET", f"/v1/streams/{token}", headers=browser) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        rest = events(response.iter_lines())
    assert ids(seen) + ids(rest) == list(range(len(ids(seen) + ids(rest))))
    assert text_of(seen) + text_of(rest) == expected
    assert rest[-1].data == "[DONE]" and rest[-2].json["choices"][0]["finish_reason"]
    heads = {(c.json["id"], c.json["created"], c.json["model"]) for c in seen + rest[:-1]}
    assert len(heads) == 1  # the same id, created and model as the first stream's


def test_a_failure_mid_stream_is_an_event_with_an_id_and_resumes(http: httpx.Client) -> None:
    body = chat("[[fail_after=3]]", resumable=True)
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        token = response.headers["x-stream-token"]
        whole = events(response.iter_lines())
    assert whole[-1].data == "[DONE]" and whole[-1].id is None
    error = whole[-2]
    assert "error" in error.json and int(error.id or -1) == len(whole) - 2
    with http.stream("GET", f"/v1/streams/{token}", headers={"Last-Event-ID": "1"}
                     ) as response:
        again = events(response.iter_lines())
    assert [e.data for e in again] == [e.data for e in whole[2:]]
    assert ids(again) == ids(whole)[2:]


def test_every_refusal_in_openai_shape_and_the_server_stays_whole(
        server: ServerProcess, http: httpx.Client) -> None:
    def refused(response: httpx.Response, status: int, param: str | None) -> None:
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["message"] and error["param"] == param

    refused(http.get("/v1/streams/no-such-token"), 404, None)
    token, _ = drop_after(http, "/v1/chat/completions", chat("[[tokens=4]]", resumable=True), 1)
    for bad in ("x", "1.5", "99", "-2", "+1", "1_0", "9" * 5000):
        refused(http.get(f"/v1/streams/{token}", headers={"Last-Event-ID": bad}), 400,
                "last_event_id")
    for bad in ("zz", "%D9%A3"):  # an Arabic-Indic 3, which int() would take
        refused(http.get(f"/v1/streams/{token}?last_event_id={bad}"), 400, "last_event_id")
    refused(http.post(f"/v1/streams/{token}"), 405, None)
    refused(httpx.get(f"{server.url}/v1/streams/{token}"), 401, None)  # no key: as the POST
    refused(http.post("/v1/chat/completions", json={**chat("hi", resumable=True),
                                                   "stream": False}), 400, "resumable")
    refused(http.post("/v1/chat/completions", json=chat("hi", resumable="yes")), 400,
            "resumable")
    refused(http.post("/v1/chat/completions", json=chat("hi", resumable=True, n=2)), 400, "n")
    refused(http.post("/v1/completions", json={"prompt": "hi", "stream": True},
                      headers={"X-Resumable": "maybe"}), 400, "X-Resumable")
    for start in ({}, {"Last-Event-ID": "-1"}):  # from the start; intact after all that
        with http.stream("GET", f"/v1/streams/{token}", headers=start) as response:
            again = events(response.iter_lines())
        assert again[0].id == "0" and again[0].json["choices"][0]["delta"]["role"]
        assert text_of(again) == reference(http, "[[tokens=4]]")


def test_not_opted_in_has_no_token_and_no_ids(http: httpx.Client) -> None:
    for headers in ({}, {"X-Resumable": "0"}):
        with http.stream("POST", "/v1/chat/completions", json=chat("[[tokens=4]]"),
                         headers=headers) as response:
            assert "x-stream-token" not in response.headers
            lines = list(response.iter_lines())
        assert lines and not [line for line in lines if line.startswith("id:")]
    # the header on a request that is not streamed is ignored (a client may set it on all)
    whole = http.post("/v1/chat/completions", headers={"X-Resumable": "1"},
                      json={**chat("[[tokens=4]]"), "stream": False})
    assert whole.status_code == 200 and "x-stream-token" not in whole.headers


def test_a_v1_resume_without_an_id_calls_it_by_its_chunk_id(server: ServerProcess,
                                                            http: httpx.Client) -> None:
    token, seen = drop_after(http, "/v1/chat/completions",
                             chat("[[tokens=6]]", resumable=True), 2)

    async def resume() -> list[dict[str, Any]]:
        ws = await websockets.connect(
            server.ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
            additional_headers=AUTH)
        try:
            assert json.loads(await ws.recv())["type"] == "hello"
            await ws.send(json.dumps({"type": "resume", "stream": token, "after_seq": 0}))
            frames: list[dict[str, Any]] = []
            while not frames or frames[-1]["type"] not in ("end", "error"):
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
            return frames
        finally:
            await ws.close()

    frames = asyncio.run(resume())
    assert frames[-1]["type"] == "end"
    assert {f["id"] for f in frames} == {seen[0].json["id"]}
    seqs = [f["seq"] for f in frames if f["type"] == "delta"]
    assert seqs == list(range(1, 1 + len(seqs))) and seqs  # after_seq 0: from seq 1


async def test_readers_racing_for_one_stream_disturb_no_other(server: ServerProcess,
                                                              http: httpx.Client) -> None:
    content = "[[pace_ms=10]][[tokens=40]]"
    expected = reference(http, content)
    token, seen = drop_after(http, "/v1/chat/completions", chat(content, resumable=True), 2)

    async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
        async def read(path: str, body: dict[str, Any] | None = None) -> list[Any]:
            method = "GET" if body is None else "POST"
            async with client.stream(method, path, json=body,
                                     headers={"Last-Event-ID": seen[-1].id or ""}) as response:
                if response.status_code == 409:  # taken over before its first event
                    error = json.loads(await response.aread())["error"]
                    return [Sse(None, json.dumps({"error": error}))]
                assert response.status_code == 200
                return events(iter([line async for line in response.aiter_lines()]))

        other = asyncio.create_task(read("/v1/chat/completions", chat(content)))
        readers = [asyncio.create_task(read(f"/v1/streams/{token}")) for _ in range(10)]
        results = await asyncio.gather(*readers)
        assert text_of(await other) == expected  # a bystander stream is untouched
    for got in results:  # each reader was taken over, or read it to the end
        assert got[-1].data == "[DONE]" or got[-1].json["error"]["code"] == "moved"
    whole = [got for got in results if got[-1].data == "[DONE]"]
    assert whole and all(text_of(seen) + text_of(got) == expected for got in whole)


async def test_a_get_takes_a_v1_reader_over(server: ServerProcess) -> None:
    ws = await websockets.connect(server.ws_url, subprotocols=["tokenpipe.v1"],  # type: ignore[list-item]
                                  additional_headers=AUTH)
    try:
        assert json.loads(await ws.recv())["type"] == "hello"
        await ws.send(json.dumps({"type": "generate", "id": "g", "resumable": True,
                                  "messages": [{"role": "user", "content": "[[pace_ms=20]]"}],
                                  "params": {"max_tokens": 30}}))
        frames = [json.loads(await asyncio.wait_for(ws.recv(), 20)) for _ in range(3)]
        assert [f["type"] for f in frames] == ["start", "delta", "delta"]
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as client:
            async with client.stream("GET", f"/v1/streams/{frames[0]['stream']}",
                                     headers={"Last-Event-ID": str(frames[-1]["seq"] + 1)}
                                     ) as response:
                while True:  # the v1 reader hears it moved (deltas sent before, if any)
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 20))
                    if frame["type"] != "delta":
                        break
                rest = events(iter([line async for line in response.aiter_lines()]))
        assert frame["type"] == "error" and frame["code"] == "moved" and frame["id"] == "g"
        assert ids(rest)[0] == frames[-1]["seq"] + 2 and rest[-1].data == "[DONE]"
        assert rest[-2].json["choices"][0]["finish_reason"] == "length"
    finally:
        await ws.close()
