"""What the bench reads of the server it measures: figures from its /metrics (tokenpipe's;
another server answers none, and the figure is then None)."""

from __future__ import annotations

import re

from ..http import HTTPError, Origin


def base_url(url: str) -> str:
    """The server's http(s) base URL from the bench's --url (ws://HOST:PORT/ws or http)."""
    base = url.replace("ws://", "http://").replace("wss://", "https://")
    return base.rstrip("/").removesuffix("/ws")


async def metric(url: str, name: str) -> float | None:
    origin = Origin(base_url(url), spares=False)
    try:
        response = await origin.fetch("GET", "/metrics", timeout_s=5)
    except (HTTPError, TimeoutError):
        return None
    finally:
        origin.close()
    text = response.body.decode("utf-8", "replace")
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else None


async def server_cpu(url: str) -> float | None:
    """Seconds of CPU the server has used (process_cpu_seconds_total)."""
    return await metric(url, "process_cpu_seconds_total")


async def server_rss(url: str) -> float | None:
    """The server's resident memory in bytes (process_resident_memory_bytes)."""
    return await metric(url, "process_resident_memory_bytes")
