"""/ws: the handshake (security.check_handshake), the per-address connection cap, then
tokenpipe.v1 (connection.py) when offered, else the article's plain-text mode (plain.py)."""

from __future__ import annotations

from fastapi.routing import APIWebSocketRoute
from starlette.websockets import WebSocket

from ...protocol import ws as wire
from ..runtime import Runtime
from ..security import check_handshake
from .connection import JsonConnection
from .plain import PlainConnection


def routes() -> list[APIWebSocketRoute]:
    """The WebSocket door's one route (doors.py)."""
    return [APIWebSocketRoute("/ws", websocket_endpoint)]


async def websocket_endpoint(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    offered = list(websocket.scope.get("subprotocols") or [])
    if not await check_handshake(websocket, runtime, offered):
        return
    client = websocket.client.host if websocket.client else "unknown"
    limit = runtime.settings.max_connections_per_client
    if runtime.per_client.get(client, 0) >= limit:
        await _refuse_busy(websocket, runtime, wire.PROTOCOL in offered, limit)
        return
    runtime.per_client[client] = runtime.per_client.get(client, 0) + 1
    protocol = wire.PROTOCOL if wire.PROTOCOL in offered else "plain"
    runtime.metrics.connections.labels(protocol).inc()
    try:
        if wire.PROTOCOL in offered:
            await JsonConnection(websocket, runtime).run()
        elif all(p.startswith(wire.BEARER_PREFIX) for p in offered):
            await PlainConnection(websocket, runtime).run()
        else:
            await websocket.close(code=1002,
                                  reason=f"unsupported subprotocol; offer {wire.PROTOCOL}")
    finally:
        runtime.metrics.connections.labels(protocol).dec()
        runtime.per_client[client] -= 1
        if not runtime.per_client[client]:
            del runtime.per_client[client]


async def _refuse_busy(websocket: WebSocket, runtime: Runtime, json_mode: bool,
                       limit: int) -> None:
    """Too many connections from one address: say so in a frame, then close 1013."""
    await websocket.accept(subprotocol=wire.PROTOCOL if json_mode else None)
    message = f"at most {limit} connections per client address; close one and retry"
    runtime.metrics.errors.labels("rate_limited", "ws" if json_mode else "plain").inc()
    if json_mode:
        await websocket.send_text(wire.dumps(wire.error("rate_limited", message,
                                                        retry_after_ms=1000)))
    await websocket.close(code=1013, reason="too many connections from this address")
