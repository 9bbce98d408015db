"""JsonConnection against a socket whose sends we hold (raw receive/send, STYLE.md item 11):
while a client's socket is backed up its deltas are merged, never dropped, seq contiguous,
and the engine is not slowed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tokenpipe.config import Settings
from tokenpipe.engines.base import EngineOptions
from tokenpipe.engines.fake import FakeEngine
from tokenpipe.scheduler import Scheduler
from tokenpipe.server.runtime import Runtime
from tokenpipe.server.ws.connection import JsonConnection


class HeldSocket:
    """The part of Starlette's WebSocket that JsonConnection uses; sends wait while held."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.open = asyncio.Event()
        self.open.set()

    async def accept(self, subprotocol: str | None = None) -> None:
        return None

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send_text(self, text: str) -> None:
        await self.open.wait()
        self.sent.append(json.loads(text))

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        return None

    def client_sends(self, frame: dict[str, Any]) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "text": json.dumps(frame)})


async def test_a_backed_up_socket_gets_merged_deltas_and_the_engine_runs_on() -> None:
    engine = FakeEngine.from_options(EngineOptions(context_size=100_000))
    runtime = Runtime(Settings(engine="fake"))
    runtime.models.add_loaded("fake", Scheduler(engine))
    sock = HeldSocket()
    connection = JsonConnection(sock, runtime)  # type: ignore[arg-type]
    task = asyncio.create_task(connection.run())
    sock.client_sends({"type": "generate", "id": "a", "prompt": "[[tokens=3000]]",
                       "params": {"max_tokens": 3000}})
    while not any(f["type"] == "delta" for f in sock.sent):  # noqa: ASYNC110 - a plain list
        await asyncio.sleep(0)
    sock.open.clear()  # the client stops reading: every send now waits
    session = connection.streams["a"].session
    await asyncio.wait_for(session.done.wait(), 10)  # the engine finished regardless
    held = len(sock.sent)
    sock.open.set()
    while not any(f["type"] == "end" for f in sock.sent):  # noqa: ASYNC110 - a plain list
        await asyncio.sleep(0.01)
    sock.inbox.put_nowait({"type": "websocket.disconnect"})
    await task

    deltas = [f for f in sock.sent if f["type"] == "delta"]
    assert [d["seq"] for d in deltas] == list(range(len(deltas)))
    reference = [e async for e in Scheduler(engine).submit(session.prepared.request).events()]
    expected = "".join(getattr(e, "text", "") for e in reference)
    assert "".join(d["text"] for d in deltas) == expected
    after = [f for f in sock.sent[held:] if f["type"] == "delta"]
    assert len(after) <= 2  # everything produced while held went out merged
    assert sum(len(d["text"]) for d in after) > 1000


def test_delta_frames_are_the_json_the_protocol_module_writes() -> None:
    """The hand-templated delta frame equals json.dumps of the dict, for awkward texts."""
    from tokenpipe.protocol import ws as wire
    from tokenpipe.session import Delta, Finished

    frame = wire.EventText("a.b-c_9")
    texts = ['say "hi"', "back\\slash", "tab\there\nnew", "\x00\x1f\x7f", "日本語 🎉👩‍💻",
             "</script>", "\u2028\u2029", " "]
    for seq, text in enumerate(texts):
        event = Delta(seq, text)
        made = frame(event)
        assert made == wire.dumps(wire.event_frame("a.b-c_9", event))
        assert json.loads(made) == {"type": "delta", "id": "a.b-c_9", "seq": seq, "text": text}
    from tokenpipe.types import FinishReason, Timing, Usage
    end = Finished(FinishReason.STOP, Usage(1, 2), Timing(0.0, 1.0, 2.0, 3.0))
    assert json.loads(frame(end))["type"] == "end"


def test_text_frame_headers_match_the_websockets_library() -> None:
    """FrameSink writes frame headers itself; they must be the RFC 6455 bytes websockets
    would write for an unmasked final text frame, at every length boundary."""
    from websockets.frames import Frame, Opcode

    from tokenpipe.server.uvicorn.flow import _text_header

    for n in (0, 1, 125, 126, 127, 65535, 65536, 70000):
        payload = b"x" * n
        assert _text_header(n) + payload == Frame(Opcode.TEXT, payload).serialize(
            mask=False, extensions=[])
