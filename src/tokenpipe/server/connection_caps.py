"""How many connections the server keeps open, in all and per client address, so that
sockets never use up the process's file descriptors (then accept() fails, and /health and
/ws stop answering). The HTTP protocol (uvicorn/http.py) asks `admit` for every new
connection, HTTP or WebSocket, and refuses with 503 past a cap."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from .log_throttle import ThrottledLog

log = logging.getLogger("tokenpipe.server")

# Descriptors kept free for what is not a held client connection: the listening socket,
# logs, model files, upstream connections of the openai engine, and connections accepted
# but not yet refused (asyncio accepts up to `backlog` of them per turn of the loop, and a
# refused one is closed two turns later): a quarter of the limit, at least 64.
MIN_RESERVE = 64
MAX_BACKLOG = 512


def open_fds() -> int:
    """Descriptors this process has open now (Linux and macOS; 0 where unknown)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


def raise_fd_limit() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard one (Linux default soft limits are low);
    returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s",
                        soft, target, exc)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@dataclass
class ConnectionCaps:
    """Open connections counted in all and per client address (0: no per-address cap),
    and the listen backlog, which bounds how many asyncio accepts in one turn."""

    total: int
    per_client: int
    backlog: int = MAX_BACKLOG
    open: int = 0
    by_client: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings, fd_limit: int, in_use: int = 0) -> ConnectionCaps:
        """The configured caps, lowered to fit `fd_limit` (with `in_use` descriptors open
        already), and no address allowed more than half of them, so one client can never
        lock every other one out."""
        reserve = max(MIN_RESERVE, fd_limit // 4)
        room = max(16, fd_limit - reserve)
        total = min(settings.max_tcp_connections, room) if settings.max_tcp_connections else room
        per_client = settings.max_tcp_connections_per_client
        if per_client:
            per_client = min(per_client, max(1, total // 2))
        # About four turns' worth of accepted sockets are open before refusals close them,
        # and each costs the loop ~0.1 ms: 512 a turn bounds a burst's stall near 50 ms
        # (uvicorn's default is 2048). A larger burst waits in the kernel for TCP's retry.
        backlog = max(8, min(MAX_BACKLOG, (reserve - in_use) // 5))
        return cls(total=total, per_client=per_client, backlog=backlog)

    def admit(self, client: str) -> str | None:
        """Counts the connection and returns None, or says why it is refused."""
        if self.open >= self.total:
            return f"the server has {self.open} open connections, its limit; retry later"
        held = self.by_client.get(client, 0)
        if self.per_client and held >= self.per_client:
            return (f"at most {self.per_client} open connections per client address; "
                    "close one and retry")
        self.open += 1
        self.by_client[client] = held + 1
        return None

    def release(self, client: str) -> None:
        self.open -= 1
        held = self.by_client.pop(client, 1) - 1
        if held:
            self.by_client[client] = held


_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def throttle_accept_errors(loop: asyncio.AbstractEventLoop, interval_s: float = 10.0) -> None:
    """asyncio logs every failed accept() (CPython 3.11 even retries a full backlog of
    them each second: about 2,000 tracebacks a second when descriptors run out); log one
    line per interval instead, with the count."""
    throttled = ThrottledLog(logging.getLogger("asyncio"), interval_s)
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS and "accept" in str(
                context.get("message", "")):
            throttled.warning("accept", "socket.accept() failed: %s; new connections wait "
                              "in the backlog until descriptors are free", exc)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
