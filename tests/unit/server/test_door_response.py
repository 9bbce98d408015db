"""DoorResponse (server/door_response.py), the one stream tail, driven through raw ASGI
receive/send (STYLE.md item 11) with a session written to by hand as the scheduler would:
the status waits for the first bytes, one write a batch, a failure before them is the
door's error status and after them in-band, queue places and prefill progress, pings,
and the client leaving cancels the generation."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from starlette.responses import PlainTextResponse, Response

from tests.unit.protocol.test_openai import Asgi
from tokenpipe.engines.base import PreparedRequest
from tokenpipe.errors import EngineError, TokenpipeError
from tokenpipe.server.door_response import DoorResponse, Headers, HeadFirst, retry_headers
from tokenpipe.session import Delta, Event, Failed, Finished, GenerationSession
from tokenpipe.types import FinishReason, GenerationRequest


class Door(DoorResponse):
    """A door as small as one can be: `<` opens, each delta is its text, `>` closes."""

    progress = True
    stream_headers: ClassVar[Headers] = [(b"content-type", b"text/test")]

    def _opening(self, event: Event) -> bytes:
        return b"<"

    def _delta(self, event: Delta) -> bytes:
        return event.text.encode()

    async def _closing(self, end: Finished | Failed) -> bytes:
        return b"!" if isinstance(end, Failed) else b">"

    def error_response(self, exc: TokenpipeError) -> Response:
        return PlainTextResponse(exc.message, status_code=exc.status)

    async def _answer(self, deltas: list[Delta], end: Finished) -> Response:
        return PlainTextResponse("".join(d.text for d in deltas))


def session(resumable: bool = False) -> tuple[GenerationSession, list[str]]:
    request = GenerationRequest(prompt="x")
    s = GenerationSession(PreparedRequest(request, "x", [1], 8), "m", resumable=resumable)
    cancels: list[str] = []
    s.bind_cancel(lambda: (cancels.append("cancel"), s.finish(FinishReason.CANCELLED)))
    return s, cancels


def start(door: DoorResponse, asgi: Asgi) -> asyncio.Task[None]:
    return asyncio.ensure_future(door({"type": "http"}, asgi.receive, asgi.send))


def bodies(asgi: Asgi) -> list[bytes]:
    return [m["body"] for _, m in asgi.sent if m["type"] == "http.response.body"]


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def said_a(asgi: Asgi, ping_s: float = 15.0
                 ) -> tuple[GenerationSession, list[str], asyncio.Task[None]]:
    """A streamed answer whose first delta, "a", is out: its session, cancels, task."""
    s, cancels = session()
    task = start(Door(s, stream=True, ping_s=ping_s), asgi)
    s.mark_started(1)
    s.add_text("a", 1)
    await turn()
    return s, cancels, task


async def test_the_status_waits_for_the_first_bytes_and_each_batch_is_one_write() -> None:
    s, cancels = session()
    asgi = Asgi()
    task = start(Door(s, stream=True), asgi)
    await turn()
    s.mark_started(3)
    await turn()
    assert asgi.sent == []  # Started says nothing: no status yet
    for piece in ("a", "b", "c"):  # written before the reader wakes: one batch
        s.add_text(piece, 1)
    await turn()
    assert asgi.start["status"] == 200 and asgi.start["headers"] == Door.stream_headers
    assert bodies(asgi) == [b"<abc"]
    s.add_text("d", 1)
    s.finish(FinishReason.STOP)
    await asyncio.wait_for(task, 1)
    assert bodies(asgi) == [b"<abc", b"d>"]
    assert asgi.sent[-1][1]["more_body"] is False
    assert cancels == []  # it ended by itself: nothing to stop


async def test_a_failure_before_the_first_byte_is_the_doors_error_status() -> None:
    s, _ = session()
    asgi = Asgi()
    task = start(Door(s, stream=True), asgi)
    s.mark_started(1)
    s.fail(EngineError("the engine broke"))
    await asyncio.wait_for(task, 1)
    assert asgi.start["status"] == 500
    assert asgi.body == b"the engine broke"


async def test_a_failure_after_the_first_byte_ends_the_stream_in_band() -> None:
    asgi = Asgi()
    s, _, task = await said_a(asgi)
    s.fail(EngineError("the engine broke"))
    await asyncio.wait_for(task, 1)
    assert asgi.start["status"] == 200 and asgi.body == b"<a!"


async def test_a_queue_place_and_prefill_progress_are_said_aside_and_commit_the_status(
) -> None:
    s, _ = session()
    asgi = Asgi()
    task = start(Door(s, stream=True), asgi)
    s.set_position(2)
    await turn()
    assert asgi.start["status"] == 200 and bodies(asgi) == [b": queued position=2\n\n"]
    s.mark_started(1000)
    s.set_progress(512, 1000)
    await turn()
    assert bodies(asgi)[-1] == b": prefill 512/1000\n\n"
    s.fail(EngineError("the engine broke"))  # the status is out: the failure is in-band
    await asyncio.wait_for(task, 1)
    assert asgi.start["status"] == 200 and bodies(asgi)[-1] == b"!"


async def test_an_idle_stream_hears_a_ping_every_ping_s() -> None:
    asgi = Asgi()
    two_pings = asyncio.Event()  # status, "<a", then two pings
    asgi.on_send = lambda _: len(asgi.sent) >= 4 and two_pings.set()
    s, _, task = await said_a(asgi, ping_s=0.05)
    said = asyncio.get_running_loop().time()
    await asyncio.wait_for(two_pings.wait(), 2)
    first_ping = asgi.sent[2][0]
    assert [m["body"] for _, m in asgi.sent[2:4]] == [b": ping\n\n"] * 2
    assert first_ping - said >= 0.04 and asgi.sent[3][0] - first_ping >= 0.04
    s.finish(FinishReason.STOP)
    await asyncio.wait_for(task, 1)
    assert bodies(asgi)[-1] == b">"


async def test_the_client_leaving_cancels_the_generation_at_once() -> None:
    asgi = Asgi()
    _, cancels, task = await said_a(asgi)
    asgi.disconnect()
    await asyncio.wait_for(task, 1)
    assert cancels == ["cancel"]
    assert bodies(asgi) == [b"<a"]  # nothing written after it left


async def test_a_whole_answer_is_the_doors_own_response() -> None:
    s, _ = session()
    asgi = Asgi()
    task = start(Door(s, stream=False), asgi)
    s.mark_started(1)
    s.add_text("a", 1)
    s.add_text("b", 1)
    s.finish(FinishReason.STOP)
    await asyncio.wait_for(task, 1)
    assert asgi.start["status"] == 200 and asgi.body == b"ab"


async def test_a_door_with_its_own_reader_and_leaving() -> None:
    """A resumable door reads from a seq and lets the generation run on when it leaves."""
    s, cancels = session(resumable=True)
    s.mark_started(1)
    first = s.cursor()
    s.add_text("a", 1)
    s.add_text("b", 1)
    first.poll(merge=False)  # seq 0 and 1 sealed
    first.close()
    left: list[Any] = []

    class Resumed(Door):
        def _reader(self) -> Any:
            return self.session.cursor(0)

        def _leave(self, cursor: Any) -> None:
            left.append(cursor)
            cursor.close()

    asgi = Asgi()
    task = start(Resumed(s, stream=True), asgi)
    await turn()
    assert bodies(asgi) == [b"<b"]
    asgi.disconnect()
    await asyncio.wait_for(task, 1)
    assert len(left) == 1 and cancels == []


async def test_head_first_sends_the_status_once() -> None:
    head = HeadFirst([(b"x", b"1")])
    asgi = Asgi()
    assert await head.write(asgi.send, [], False) is False and asgi.sent == []
    await head.start(asgi.send)
    await head.start(asgi.send)
    assert await head.write(asgi.send, [b"a", b"b"], True) is True
    assert [m["type"] for _, m in asgi.sent] == ["http.response.start", "http.response.body"]
    assert asgi.body == b"ab"


def test_retry_after_is_whole_seconds_at_least_one_and_in_ms_for_the_sdks() -> None:
    busy = TokenpipeError("busy", retry_after_ms=1500)
    assert retry_headers(busy) == {"retry-after": "2", "retry-after-ms": "1500"}
    assert retry_headers(busy, ms=False) == {"retry-after": "2"}  # Ollama's
    assert retry_headers(TokenpipeError("soon", retry_after_ms=10))["retry-after"] == "1"
    assert retry_headers(TokenpipeError("no time")) == {}
