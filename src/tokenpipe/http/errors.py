"""The client's errors (named as httpx names them, which the openai engine's messages and
logs used before this client existed):

    HTTPError
     ├── ConnectError          the connection could not be made
     ├── RemoteProtocolError   the server closed mid-answer or broke HTTP/1.1's framing
     └── WriteError            the request could not be sent

A timeout is the builtin TimeoutError: the caller owns its clocks.
"""

from __future__ import annotations


class HTTPError(Exception):
    """Any failure of the transport or of the server's HTTP framing."""


class ConnectError(HTTPError):
    """The connection could not be made (refused, unreachable, TLS handshake, timeout)."""


class RemoteProtocolError(HTTPError):
    """The server closed the connection mid-answer or broke HTTP/1.1's framing."""


class WriteError(HTTPError):
    """The request could not be sent."""
