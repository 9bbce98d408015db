"""uvicorn's httptools protocol with what a hostile client needs: limits on the request
head and body, deadlines for them to arrive, caps on open connections, and the Host check
(DNS rebinding). Each refusal is answered here, on the socket, before any application code
runs, then
the connection is closed. `run_server` selects it with `http=guarded_http(...)`.

uvicorn API relied on beyond the asyncio.Protocol interface (uvicorn 0.54, see the tests):
`HttpToolsProtocol` and its parser callbacks (`on_message_begin`, `on_url`, `on_header`,
`on_headers_complete`, `on_body`, `on_message_complete`), `handle_websocket_upgrade`,
and the attributes `loop`, `transport`, `client`, `url`, `headers`, `parser`, `cycle`
(`RequestResponseCycle.response_started`, `.response_complete`), `ws_protocol_class`,
`server_state.default_headers`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ...config import Settings
from ..connection_caps import ConnectionCaps
from ..doors import DOORS, Door
from ..http_limits import HttpLimits, refusal
from ..log_throttle import ThrottledLog
from ..security import HostPolicy, host_policy

log = logging.getLogger("tokenpipe.server")
# After a refusal the rest of the request is read and dropped for a while (lingering close,
# as nginx does): a client still sending its body would otherwise get a reset, not the answer.
LINGER_S = 5.0
LINGER_BYTES = 64 * 1024 * 1024
_RELEASE = "_tokenpipe_release"  # set on a WebSocket protocol that holds a connection slot


class GuardedHttpProtocol(HttpToolsProtocol):
    limits: ClassVar[HttpLimits]
    caps: ClassVar[ConnectionCaps]
    hosts: ClassVar[HostPolicy]
    refusals: ClassVar[ThrottledLog]
    doors: ClassVar[Sequence[Door]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.ws_protocol_class is not None:  # a WebSocket keeps its slot until it closes
            self.ws_protocol_class = _releasing(self.ws_protocol_class)
        self.url = b""  # uvicorn sets it per request; a refusal before one reads it
        self._client: str | None = None  # set while this connection holds a slot in caps
        self._refused = False
        self._in_head = True  # waiting for (the rest of) a request head
        self._head_bytes = 0  # bytes of reads that ended inside the current head
        self._head_size = 0  # request line and headers parsed so far
        self._body_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._dropped = 0  # bytes read and dropped after a refusal

    # ---- the connection ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        client = self.client[0] if self.client else ""
        why = self.caps.admit(client)
        if why is not None:
            self.refusals.warning("cap", "refused a connection from %s with 503: %s",
                                  client, why)
            self._refuse(503, why, retry_after_s=1)
            return
        self._client = client
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s,
                                                self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self._release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:  # lingering: the answer is out, what still comes is dropped
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                self.transport.close()
            return
        super().data_received(data)
        if self._in_head and not self._refused and not self.transport.is_closing():
            # a head still unfinished after this read: httptools holds it all in memory
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refuse(431, f"the request head is over {self.limits.max_header_bytes}"
                             " bytes")

    def handle_websocket_upgrade(self) -> None:
        if self._refused:
            return
        super().handle_websocket_upgrade()
        protocol = self.transport.get_protocol()
        if protocol is not self and self._client is not None:
            setattr(protocol, _RELEASE, functools.partial(self.caps.release, self._client))
            self._client = None  # the WebSocket protocol releases the slot now

    # ---- parser callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._in_head, self._head_size, self._body_bytes = True, 0, 0
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s,
                                                    self._head_timeout)

    def on_url(self, url: bytes) -> None:
        if self._refused:
            return
        super().on_url(url)
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        super().on_header(name, value)
        if len(self.headers) > self.limits.max_headers:
            self._refuse(431, f"more than {self.limits.max_headers} header lines")
            return
        self._grow_head(len(name) + len(value) + 4)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head, self._head_bytes = False, 0
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        host = length = None
        for name, value in self.headers:
            if name == b"host" and host is None:
                host = value.decode("latin-1")
            elif name == b"content-length":
                length = value
        if not self.hosts.allows(host):
            self._refuse(421, f"this server does not answer for the host {host!r}: it "
                         "serves loopback names and those given to --allowed-hosts")
            return
        if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            self._refuse(413, self._too_large())
            return
        super().on_headers_complete()
        if not self.parser.should_upgrade():  # cancelled when the body has all come
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s,
                                                    self._body_timeout)

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(body)  # chunked bodies say no length ahead
        if self._body_bytes > self.limits.max_body_bytes:
            self._refuse(413, self._too_large(), during_body=True)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    # ---- refusals -----------------------------------------------------------------------
    def _grow_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.limits.max_header_bytes:
            self._refuse(431, f"the request head is over {self.limits.max_header_bytes} bytes")

    def _too_large(self) -> str:
        return (f"the request body is over {self.limits.max_body_bytes} bytes, this server's "
                "limit (--max-body-bytes)")

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._in_head and not self._refused:
            self._refuse(408, "the request head did not arrive within "
                         f"{self.limits.header_timeout_s:g} s")

    def _body_timeout(self) -> None:
        self._body_timer = None
        if not self._refused:
            self._refuse(408, "the request body did not arrive within "
                         f"{self.limits.body_timeout_s:g} s", during_body=True)

    def _refuse(self, status: int, message: str, *, during_body: bool = False,
                retry_after_s: int | None = None) -> None:
        """Answers `status` unless a response was already written on this connection (or is
        being written: then it only closes), and closes; nothing after it is parsed."""
        self._refused = True
        self._cancel_timers()
        cycle = self.cycle
        if during_body:  # the cycle is this request's
            can_answer = cycle is None or not cycle.response_started
        else:  # the cycle, if any, is the previous request's
            can_answer = cycle is None or cycle.response_complete
        answered = cycle is not None and cycle.response_complete
        if status != 503:
            self.refusals.warning(str(status), "refused a request from %s with %d: %s",
                                  self._client, status, message)
        if self.transport.is_closing() or not (can_answer or answered):
            self.transport.close()
            return
        if can_answer:
            self.transport.write(refusal(status, message, self.url,
                                         self.server_state.default_headers, retry_after_s,
                                         self.doors))
        if status == 503 or not self.transport.can_write_eof():  # 503: free the descriptor now
            self.transport.close()
            return
        # half-close: the client reads the answer, then EOF; what it still sends is dropped
        # until it closes too (eof_received), or LINGER_BYTES, or LINGER_S
        self.transport.write_eof()
        self.transport.resume_reading()  # uvicorn pauses reading a body nobody reads
        self._linger = self.loop.call_later(LINGER_S, self.transport.close)

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer, self._linger):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._linger = None

    def _release(self) -> None:
        if self._client is not None:
            self.caps.release(self._client)
            self._client = None


_RELEASING: dict[type[asyncio.Protocol], type[asyncio.Protocol]] = {}


def _releasing(base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """`base` (uvicorn's WebSocket protocol) releasing the connection's slot when lost."""
    if base in _RELEASING:
        return _RELEASING[base]

    class Releasing(base):  # type: ignore[valid-type, misc]
        def connection_lost(self, exc: Exception | None) -> None:
            try:
                super().connection_lost(exc)
            finally:
                release = self.__dict__.pop(_RELEASE, None)
                if release is not None:
                    release()

    Releasing.__name__ = Releasing.__qualname__ = f"Releasing{base.__name__}"
    _RELEASING[base] = Releasing
    return Releasing


def guarded_http(settings: Settings, caps: ConnectionCaps,
                 doors: Sequence[Door] = DOORS) -> type[GuardedHttpProtocol]:
    """The protocol class for uvicorn's `http=`, bound to these settings, caps and doors
    (whose shapes its refusals take)."""

    class Guarded(GuardedHttpProtocol):
        limits = HttpLimits.of(settings)
        hosts = host_policy(settings)
        refusals = ThrottledLog(log)

    Guarded.caps = caps
    Guarded.doors = doors
    return Guarded
