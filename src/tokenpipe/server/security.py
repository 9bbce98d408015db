"""Handshake checks for /ws: API key and browser Origin (cross-site WebSocket hijacking)."""

from __future__ import annotations

import base64
import binascii
import hmac
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from .runtime import Runtime

BEARER_PREFIX = "tokenpipe.bearer."
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


def origin_allowed(origin: str, host_header: str | None, allowed: tuple[str, ...]) -> bool:
    if origin in allowed or "*" in allowed:
        return True
    parts = urlsplit(origin)
    hostname = (parts.hostname or "").lower()
    if hostname in _LOOPBACK or hostname.startswith("127."):
        return True
    return host_header is not None and parts.netloc.lower() == host_header.lower()


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
        origin, websocket.headers.get("host"), settings.allowed_origins
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
    body = {"error": {"message": message, "type": "authentication_error" if status == 401
                      else "permission_error", "param": None,
                      "code": "unauthorized" if status == 401 else "forbidden"}}
    try:
        await websocket.send_denial_response(JSONResponse(body, status_code=status))
    except RuntimeError:  # the server has no denial-response extension: plain close (403)
        await websocket.close(code=1008, reason=message)
