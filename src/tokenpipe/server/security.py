"""Who may talk to the server: the API key (checked for every request, deny by default,
by RequireKey, and by the /ws handshake, check_handshake), the browser Origin on /ws
(cross-site WebSocket hijacking) and the Host header on every route (DNS rebinding).
docs/security.md has the threat model."""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from ..config import Settings
from ..protocol.openai.errors import error_json
from ..protocol.ws import BEARER_PREFIX
from .doors import DOORS, PUBLIC, Door, door_at, error_body
from .runtime import Runtime


def is_loopback(hostname: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1): parsed, never a prefix match,
    so `127.0.0.1.evil.com` is not one."""
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def host_name(authority: str) -> str | None:
    """`Host` header or netloc -> its lower-case host name without port or brackets
    (`[::1]:8000` -> `::1`); None when it is not a well-formed host[:port]."""
    value = authority.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, port = value[1:end], value[end + 1:]
        if end < 0 or ":" not in name or (port and not port.startswith(":")):
            return None
        port = port[1:]
    else:
        name, _, port = value.partition(":")
        if ":" in port:  # an IPv6 address without brackets is not a Host
            return None
    if port and not (port.isascii() and port.isdigit()):
        return None
    return name or None


@dataclass(frozen=True)
class HostPolicy:
    """Which Host headers the server answers. Bound to a loopback address it answers only
    loopback names (a DNS-rebinding page sends its own name) and `allowed`; bound to any
    other address it answers every Host unless `allowed` names some. `*` allows all."""

    any_host: bool
    allowed: frozenset[str]

    @classmethod
    def of(cls, bind_host: str, allowed_hosts: tuple[str, ...]) -> HostPolicy:
        names = frozenset(n for n in (host_name(h) for h in allowed_hosts if h != "*") if n)
        loopback_bound = is_loopback(bind_host.strip().strip("[]").lower())
        any_host = "*" in allowed_hosts or (not loopback_bound and not allowed_hosts)
        return cls(any_host=any_host, allowed=names)

    def allows(self, host_header: str | None) -> bool:
        if self.any_host or host_header is None:  # browsers always send Host
            return True
        name = host_name(host_header)
        return name is not None and (is_loopback(name) or name in self.allowed)


@functools.lru_cache(maxsize=8)
def _policy(bind_host: str, allowed_hosts: tuple[str, ...]) -> HostPolicy:
    return HostPolicy.of(bind_host, allowed_hosts)


def host_policy(settings: Settings) -> HostPolicy:
    return _policy(settings.host, settings.allowed_hosts)


def origin_allowed(origin: str, host_header: str | None, allowed: tuple[str, ...],
                   hosts: HostPolicy) -> bool:
    """A browser page may open /ws when its origin is listed, is a loopback one, or is the
    server's own (Origin equal to Host) on a Host the server answers."""
    if origin in allowed or "*" in allowed:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return False
    hostname = host_name(parts.netloc)  # strict: `[::1].evil.com` is no loopback origin
    if parts.scheme in ("http", "https") and hostname and is_loopback(hostname):
        return True
    return (host_header is not None and hosts.allows(host_header)
            and parts.netloc.lower() == host_header.lower())


def key_matches(expected: str, authorization: str | None, offered: list[str]) -> bool:
    candidates: list[str] = []
    if authorization and authorization.lower().startswith("bearer "):
        candidates.append(authorization[7:].strip())
    for proto in offered:
        if proto.startswith(BEARER_PREFIX):
            raw = proto[len(BEARER_PREFIX) :]
            try:
                candidates.append(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode())
            except (binascii.Error, UnicodeDecodeError, ValueError):
                continue
    return any(hmac.compare_digest(c.encode(), expected.encode()) for c in candidates)


async def check_handshake(websocket: WebSocket, runtime: Runtime, offered: list[str]) -> bool:
    """Refuses the handshake (HTTP 401/403, before hello) when the client may not connect."""
    settings = runtime.settings
    origin = websocket.headers.get("origin")
    if origin is not None and not origin_allowed(
        origin, websocket.headers.get("host"), settings.allowed_origins, host_policy(settings)
    ):
        await _deny(websocket, 403, f"origin {origin} is not allowed")
        return False
    if settings.api_key and not key_matches(
        settings.api_key, websocket.headers.get("authorization"), offered
    ):
        await _deny(websocket, 401, "missing or wrong API key")
        return False
    return True


async def _deny(websocket: WebSocket, status: int, message: str) -> None:
    body = error_json(message, status=status,
                      code="unauthorized" if status == 401 else "forbidden")
    try:
        await websocket.send_denial_response(JSONResponse(body, status_code=status))
    except RuntimeError:  # the server has no denial-response extension: plain close (403)
        await websocket.close(code=1008, reason=message)


class RequireKey:
    """ASGI middleware: with an API key configured, deny by default. Every request, HTTP or
    WebSocket, must carry the key (`Authorization: Bearer KEY`, or the header its door
    reads it from: Anthropic's `x-api-key: KEY`), unless it is PUBLIC, a GET of one of the
    page's files (`page`), or on a door that checks the key itself (/ws: check_handshake);
    else it is answered 401 before any route, in the shape of the door that owns the path
    (doors.py; FastAPI's `{"detail"}` where none does)."""

    def __init__(self, app: ASGIApp, settings: Settings, doors: Sequence[Door] = DOORS,
                 page: Callable[[str], bool] = lambda path: False) -> None:
        self.app = app
        self.key = settings.api_key
        self.doors = doors
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.key and scope["type"] in ("http", "websocket"):
            door = door_at(scope["path"], self.doors)
            if not self._open(scope, door) and not self._carries_key(scope, door):
                await self._deny(scope, receive, send, door)
                return
        await self.app(scope, receive, send)

    def _open(self, scope: Scope, door: Door | None) -> bool:
        if door is not None:
            return door.own_key
        path = scope["path"]
        return path in PUBLIC or (scope.get("method") in ("GET", "HEAD") and self.page(path))

    def _carries_key(self, scope: Scope, door: Door | None) -> bool:
        assert self.key is not None
        for name in door.key_headers if door is not None else ("authorization", "x-api-key"):
            offered = _header(scope, name.encode())
            if offered is None:
                continue
            if name == "authorization":
                if key_matches(self.key, offered, []):
                    return True
            elif hmac.compare_digest(offered.strip().encode(), self.key.encode()):
                return True
        return False

    async def _deny(self, scope: Scope, receive: Receive, send: Send,
                    door: Door | None) -> None:
        body = error_body(401, _NO_KEY, scope["path"], self.doors)
        if scope["type"] == "http":
            await JSONResponse(body, status_code=401)(scope, receive, send)
        elif "websocket.http.response" in scope.get("extensions", {}):
            await JSONResponse(body, status_code=401)(scope, receive, _denial(send))
        else:  # no denial-response extension: refused before the handshake completes
            await send({"type": "websocket.close", "code": 1008})


_NO_KEY = "Incorrect or missing API key: send Authorization: Bearer KEY"


def _denial(send: Send) -> Send:
    """An HTTP response sent as a WebSocket handshake's denial (ASGI's extension)."""

    async def deny(message: Message) -> None:
        part = message["type"].rpartition(".")[2]  # http.response.start -> start
        await send({**message, "type": f"websocket.http.response.{part}"})

    return deny


def _header(scope: Scope, name: bytes) -> str | None:
    """The first header of that name, as Starlette reads it."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
