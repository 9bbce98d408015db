"""What the doors share: settings, the models, resumable streams, metrics, open sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..config import Settings
from ..metrics import Metrics
from .followers import Followers
from .resumable import LocalResumeStore, ResumeStore
from .sessions import ModelRegistry

SERVER_NAME = f"tokenpipe/{__version__}"
DRAIN_MARGIN_S = 2.0  # shutdown: the close frames' time on top of the grace
log = logging.getLogger("tokenpipe.server")


@dataclass
class Runtime:
    """What the doors share: the settings, the models (the one start), resumable streams,
    metrics and the open /ws connections (shutdown drains them)."""

    settings: Settings
    models: ModelRegistry = field(default_factory=ModelRegistry)
    metrics: Metrics = field(default_factory=Metrics)
    connections: set[Any] = field(default_factory=set)  # open /ws connections
    per_client: dict[str, int] = field(default_factory=dict)  # open /ws per client address
    resumable: ResumeStore = field(init=False)
    followers: Followers = field(init=False)  # streams each client address follows

    def __post_init__(self) -> None:
        s = self.settings
        self.followers = Followers(s.max_followers_per_client)
        if s.state is None:
            self.resumable = LocalResumeStore(s.resume_grace_s)
        else:
            from .state import shared_store

            store = shared_store(s.state, s.resume_grace_s, s.state_prefix, s.state_lease_s,
                                 s.state_address or advertised(s.host, s.port))
            store.start = lambda request, api: self.models.start(request, api=api)
            self.metrics.add_state(store)
            self.resumable = store

    def limits(self) -> dict[str, int]:
        """The default model's limits, for tokenpipe.v1's hello."""
        s = self.settings
        return self.models.limits(s.max_message_bytes, s.max_streams_per_connection,
                                  s.default_max_tokens)

    async def drain(self) -> None:
        """Graceful shutdown, before the server closes connections: refuse new work, let
        running generations finish up to the grace deadline, fail the rest with
        shutting_down, and close every socket with 1012 once its final frames are out.
        Bounded as a whole by the grace plus DRAIN_MARGIN_S: a socket whose client has
        not taken its frames by then is aborted, never waited for."""
        self.resumable.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.shutdown_grace_s + DRAIN_MARGIN_S
        try:
            async with asyncio.timeout_at(deadline):
                await self.models.aclose(self.settings.shutdown_grace_s)
                left = max(0.0, deadline - loop.time() - 1.0)  # 1 s for the close frames
                await asyncio.gather(*(c.close_when_flushed(1012, left)
                                       for c in list(self.connections)),
                                     return_exceptions=True)
        except TimeoutError:
            log.warning("shutdown: %d connection(s) still busy after %.1f s; cut off",
                        len(self.connections), self.settings.shutdown_grace_s + DRAIN_MARGIN_S)
            self.abort_connections()

    async def stop_now(self) -> None:
        """Shutdown without waiting (a second signal): every generation fails with
        shutting_down, every /ws connection is cut off."""
        self.abort_connections()
        await self.models.aclose(0)

    def abort_connections(self) -> None:
        """Every /ws connection still open goes now (shutdown past its deadline)."""
        for connection in list(self.connections):
            with contextlib.suppress(Exception):
                connection.abort()

    async def close(self) -> None:
        await self.resumable.aclose()


def advertised(host: str, port: int) -> str | None:
    """Where the other replicas reach this one: --host and --port, or for a wildcard
    host this machine's address by its name; None where unknown (port 0, no address)."""
    if not port:
        return None
    if host in ("", "0.0.0.0", "::"):
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
