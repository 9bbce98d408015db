"""What an HTTP request may be (head size and line count, body size, how long its head and
body may take to arrive) and the answer a request over a limit gets, written straight to
the socket by the HTTP protocol (uvicorn/http.py) before any application code runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus

from ..config import Settings
from ..protocol.openai.errors import error_json
from . import doors as door_table
from .doors import DOORS, Door


@dataclass(frozen=True)
class HttpLimits:
    max_body_bytes: int
    max_header_bytes: int
    max_headers: int
    header_timeout_s: float
    body_timeout_s: float

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        body = settings.max_body_bytes
        return cls(max_body_bytes=settings.max_message_bytes if body is None else body,
                   max_header_bytes=settings.max_header_bytes,
                   max_headers=settings.max_headers,
                   header_timeout_s=settings.header_timeout_s,
                   body_timeout_s=settings.body_timeout_s)


def error_body(status: int, message: str, url: bytes, doors: Sequence[Door] = DOORS) -> bytes:
    """In the shape of the door that owns the path (doors.py; on /ws OpenAI's, as the
    handshake's other refusals), FastAPI's `detail` where none does; OpenAI's when the
    path is not known (nothing of the request parsed yet)."""
    path = url.partition(b"?")[0].decode("latin-1")
    if not path:
        body = error_json(message, status=status)
    else:
        body = door_table.error_body(status, message, path, doors)
    return json.dumps(body).encode()


def refusal(status: int, message: str, url: bytes,
            headers: Sequence[tuple[bytes, bytes]] = (),
            retry_after_s: int | None = None, doors: Sequence[Door] = DOORS) -> bytes:
    """A whole HTTP/1.1 response that closes the connection."""
    body = error_body(status, message, url, doors)
    lines = [b"HTTP/1.1 %d %s" % (status, HTTPStatus(status).phrase.encode())]
    lines += [name + b": " + value for name, value in headers]
    lines += [b"content-type: application/json", b"content-length: %d" % len(body),
              b"connection: close"]
    if retry_after_s is not None:
        lines.append(b"retry-after: %d" % retry_after_s)
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
