"""Who may talk to the server: the API key (checked once for HTTP, RequireKey, and once for
WebSocket, check_handshake), the browser Origin on /ws (cross-site WebSocket hijacking) and
the Host header on every route (DNS rebinding). docs/security.md has the threat model."""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from ..config import Settings
from ..protocol.anthropic.errors import covers as anthropic_path
from ..protocol.anthropic.errors import error_json as anthropic_error_json
from ..protocol.ollama.errors import error_json as ollama_error
from ..protocol.openai.errors import error_json
from ..protocol.ws import BEARER_PREFIX
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


_NO_KEY = error_json("Incorrect or missing API key: send Authorization: Bearer KEY",
                     status=401, code="invalid_api_key")
_NO_ANTHROPIC_KEY = anthropic_error_json("invalid x-api-key: send x-api-key: KEY (or "
                                         "Authorization: Bearer KEY)", status=401)
_NO_KEY_OLLAMA = ollama_error("unauthorized: missing or wrong API key (send Authorization: "
                              "Bearer KEY)")


class RequireKey:
    """ASGI middleware: with an API key configured, every /v1/ and /api/ request must carry
    it (`Authorization: Bearer KEY`, or Anthropic's `x-api-key: KEY`), or is answered 401
    before any route, in its door's shape (Anthropic's under /v1/messages, Ollama's under
    /api/, OpenAI's elsewhere)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.key = settings.api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.key and scope["type"] == "http":
            path = scope["path"]
            ollama = path == "/api" or path.startswith("/api/")
            if (ollama or path.startswith("/v1/")) and not self._carries_key(scope):
                body = (_NO_KEY_OLLAMA if ollama else
                        _NO_ANTHROPIC_KEY if anthropic_path(path) else _NO_KEY)
                await JSONResponse(body, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _carries_key(self, scope: Scope) -> bool:
        assert self.key is not None
        if key_matches(self.key, _header(scope, b"authorization"), []):
            return True
        offered = _header(scope, b"x-api-key")
        return offered is not None and hmac.compare_digest(offered.strip().encode(),
                                                           self.key.encode())


def _header(scope: Scope, name: bytes) -> str | None:
    """The first header of that name, as Starlette reads it."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
