"""A sans-IO decoder of server-sent events (the WHATWG "event stream" interpretation).

Bytes go in as the network delivers them, split anywhere (inside a line, inside a CRLF,
inside a multi-byte UTF-8 character); complete events come out. No I/O, no clock: the
caller owns the socket and the timeouts, and tests drive it with arbitrary splits.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_EOL = re.compile(r"\r\n|\r|\n")  # not str.splitlines: U+2028 and friends are data here


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str = ""  # the last event id seen so far, as the spec defines it
    retry: int | None = None  # a `retry:` field seen since the previous event


class SSEDecoder:
    """feed(bytes) -> the events those bytes completed; close() at the end of the stream."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail = ""  # the current line, not yet terminated (holds no CR or LF)
        self._skip_lf = False  # the previous text ended in CR: a leading LF completes a CRLF
        self._at_start = True  # a byte order mark may open the stream, once
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None

    @property
    def partial(self) -> bool:
        """Whether the bytes so far end inside an event (a truncated stream loses it)."""
        return bool(self._tail or self._data or self._event)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        return self._text(self._utf8.decode(chunk))

    def close(self) -> list[ServerSentEvent]:
        """The stream ended: an incomplete last event is dropped, as the spec says."""
        events = self._text(self._utf8.decode(b"", final=True))
        self._tail = ""
        self._data.clear()
        self._event = ""
        return events

    def _text(self, text: str) -> list[ServerSentEvent]:
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            if text[0] == "\ufeff":
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text[:1] == "\n":
                text = text[1:]
        events: list[ServerSentEvent] = []
        buf = self._tail + text
        pos = 0
        # The old tail holds no line end, so the search starts where the new text does.
        for match in _EOL.finditer(buf, len(self._tail)):
            self._line(buf[pos : match.start()], events)
            pos = match.end()
        self._tail = buf[pos:]
        # A CR that ends this text may be half of a CRLF whose LF is still on the wire.
        self._skip_lf = pos == len(buf) and buf[-1:] == "\r"
        return events

    def _line(self, line: str, events: list[ServerSentEvent]) -> None:
        if not line:
            if self._data:
                events.append(ServerSentEvent("\n".join(self._data), self._event or "message",
                                              self._last_id, self._retry))
                self._retry = None
            self._data.clear()
            self._event = ""
            return
        if line[0] == ":":
            return  # a comment: keeps the connection alive, carries nothing
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
