"""uvicorn's websockets-sansio protocol, hardened against clients that do not play along;
`tokenpipe serve` selects it by `ws=` (run_server).

- A client that does not read cannot make the server buffer for it: while the transport's
  write buffer is over its high-water mark, the server stops reading that socket (the
  client's own frames wait in its TCP buffer), and pongs to its pings are not queued;
  backed up for `stall_timeout_s`, the connection is aborted.
- Every frame the client sends can be counted in the connection's frame budget: the
  tokenpipe.v1 connection sets `frame_gate`; a control ping it refuses gets no pong. It
  sets `on_backed_up` too, to time the stall however the buffer filled, and calls
  `hold_reading` when the client is over its budget (the rest waits in TCP, unparsed).
- An upgrade request websockets refuses (a header line over 8 KB, more than 128 header
  lines) gets websockets' answer (431, with a body), where uvicorn never wrote it.
- At shutdown a socket whose buffer the client never drains is aborted, not waited for.

Relies on uvicorn's private attributes `conn`, `transport`, `read_paused`, `writable`,
`queue`, `handshake_initiated`, `close_sent` and its `handle_ping`/`handle_pong`/
`receive`/`shutdown` methods (uvicorn 0.54), and on websockets (17.x) queueing one
`data_to_send()` item per frame; the lead pins both ranges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

log = logging.getLogger("tokenpipe.ws")
_PONG = 0x8A  # first byte of an unmasked, final pong frame (what a server writes)
FEED_BYTES = 16384  # parsed per slice of a read: a few ms of the loop at most


class TokenpipeWebSocketProtocol(WebSocketsSansIOProtocol):
    stall_timeout_s = 60.0  # backed up this long: aborted (connections set their own)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes_paused = False
        self.frame_gate: Callable[[], bool] | None = None  # True: the frame may pass
        self.on_backed_up: Callable[[], None] | None = None  # the app watches the stall
        self._stall: asyncio.TimerHandle | None = None
        self._hold: asyncio.TimerHandle | None = None
        self._held_data = bytearray()  # read, not parsed yet (see data_received)
        self._feed_scheduled = False
        self._reads_off = False

    # ---- no reading while the client does not read, or is over its budget ---------------
    def pause_writing(self) -> None:
        super().pause_writing()
        self.writes_paused = True
        self.transport.pause_reading()
        self._stall = self.loop.call_later(self.stall_timeout_s, self._stalled)
        if self.on_backed_up is not None:  # also when pongs, not the app, filled the buffer
            self.on_backed_up()

    def resume_writing(self) -> None:
        super().resume_writing()
        self.writes_paused = False
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self._resume_reading()

    def hold_reading(self, seconds: float) -> None:
        """Reads nothing for `seconds`: frames past the budget wait in the client's TCP
        buffer instead of costing the server a parse each."""
        if self._hold is None:
            self.transport.pause_reading()
            self._hold = self.loop.call_later(seconds, self._end_hold)

    def _end_hold(self) -> None:
        self._hold = None
        self._resume_reading()

    def stop_reading(self) -> None:
        """For good: the connection is being cut off (its close reply is not awaited)."""
        self._reads_off = True
        self.transport.pause_reading()

    def _reading_allowed(self) -> bool:
        """uvicorn's app has taken every message, the client reads, it is within budget."""
        return not (self.read_paused or self.writes_paused or self._hold is not None
                    or self._reads_off)

    def _resume_reading(self) -> None:
        if not self._reading_allowed():
            return
        if self._held_data:  # parse what was read first, in a later turn (fairness)
            if not self._feed_scheduled:
                self._feed_scheduled = True
                self.loop.call_soon(self._feed_held)
        else:
            self.transport.resume_reading()

    def _stalled(self) -> None:
        """The backstop for any connection: its app's own slow-client bound comes first."""
        log.warning("client took no data for %.0f s; connection aborted", self.stall_timeout_s)
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._stall, self._hold):
            if timer is not None:
                timer.cancel()
        self._stall = self._hold = None
        self._held_data.clear()
        super().connection_lost(exc)

    async def receive(self) -> Any:
        message = await self.queue.get()
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            self._resume_reading()  # the change: uvicorn resumes the socket regardless
        return message

    def handle_ping(self) -> None:
        # websockets queued one pong per ping while parsing; each is its own item in
        # data_to_send(). Drop pongs for refused pings and while the socket is backed up
        # (RFC 6455 5.5.3 lets a server answer only the latest of several pings).
        output = self.conn.data_to_send()
        allowed = self.frame_gate() if self.frame_gate is not None else True
        if not allowed or self.writes_paused:
            output = [part for part in output if not part[:1] == bytes((_PONG,))]
        if output:
            self.transport.write(b"".join(output))

    def handle_pong(self, event: Any) -> None:
        if self.frame_gate is not None:
            self.frame_gate()  # counted; a pong asks for nothing, so nothing to refuse
        super().handle_pong(event)

    # ---- data in, a slice at a time ------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        # One read can hold 256 KiB of tiny frames (>100 ms of parsing and queueing), and
        # uvicorn parses it all at once. Fed in slices instead: once a slice queued a message
        # the app has not taken, or put the client over its budget, the rest waits, unparsed,
        # and the socket is not read meanwhile.
        if self._held_data or not self._reading_allowed():
            self._held_data += data  # uvicorn resumed reading on its own (a close does)
            self.transport.pause_reading()
            self._resume_reading()
            return
        self._feed_slices(data)

    def _feed_slices(self, data: bytes) -> None:
        for start in range(0, len(data), FEED_BYTES):
            self._feed(data[start : start + FEED_BYTES])
            if self.transport.is_closing():
                return
            # Closing, uvicorn discards messages (nothing pauses): a slice a loop turn.
            if not self._reading_allowed() or self.close_sent:
                rest = data[start + FEED_BYTES :]
                if rest:
                    self._held_data += rest
                    self.transport.pause_reading()
                    self._resume_reading()
                return

    def _feed_held(self) -> None:
        self._feed_scheduled = False
        if not self._reading_allowed() or self.transport.is_closing():
            return  # the next _resume_reading schedules it again
        held = bytes(self._held_data)
        self._held_data.clear()
        self._feed_slices(held)
        self._resume_reading()

    def _feed(self, data: bytes) -> None:
        super().data_received(data)
        if (not self.handshake_initiated and self.conn.handshake_exc is not None
                and not self.transport.is_closing()):
            self._answer_refused_upgrade()

    def _answer_refused_upgrade(self) -> None:
        output = b"".join(self.conn.data_to_send())
        if not output.startswith(b"HTTP/"):  # no answer queued: a plain 400
            body = b"Failed to open a WebSocket connection: invalid HTTP request.\n"
            output = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
                      b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        log.info("refused a WebSocket upgrade: %s", self.conn.handshake_exc)
        self.close_sent = True
        self.transport.write(output)
        self.transport.close()

    # ---- bounded shutdown ----------------------------------------------------------------
    def shutdown(self) -> None:
        super().shutdown()
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # the client had the drain's grace to read this
