"""The lean HTTP/1.1 client and the SSE decoder: the openai engine's streams, health checks
and model lists, and the bench's SSE load. Imports nothing of tokenpipe.

    origin = Origin("http://127.0.0.1:8080")
    conn = await origin.request("POST", "/v1/chat/completions", body, headers)
    decoder = SSEDecoder()
    while (raw := await conn.receive()) is not None:
        for event in decoder.feed(raw):
            ...
    conn.release()  # back to the pool when read to its end, closed otherwise
"""

from .client import Origin, Response
from .connection import Connection
from .errors import ConnectError, HTTPError, RemoteProtocolError, WriteError
from .sse import ServerSentEvent, SSEDecoder

__all__ = [
    "ConnectError",
    "Connection",
    "HTTPError",
    "Origin",
    "RemoteProtocolError",
    "Response",
    "SSEDecoder",
    "ServerSentEvent",
    "WriteError",
]
