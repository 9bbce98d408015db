"""What the adapters share: settings, the engine's scheduler, resumable streams, limits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..config import Settings
from ..engines.base import Engine
from ..errors import EngineUnavailable, UnknownModel
from ..metrics import Metrics
from ..scheduler import Scheduler
from ..session import GenerationSession

SERVER_NAME = f"tokenpipe/{__version__}"
DRAIN_MARGIN_S = 2.0  # shutdown: the close frames' time on top of the grace
log = logging.getLogger("tokenpipe.server")


@dataclass
class Runtime:
    settings: Settings
    schedulers: dict[str, Scheduler] = field(default_factory=dict)  # by model name
    load_error: str | None = None
    expected: int = 1  # models configured
    resumable: dict[str, GenerationSession] = field(default_factory=dict)
    _grace: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    shutting_down: bool = False
    metrics: Metrics = field(default_factory=Metrics)
    connections: set[Any] = field(default_factory=set)  # open /ws connections
    per_client: dict[str, int] = field(default_factory=dict)  # open /ws per client address

    @property
    def ready(self) -> bool:
        """Every configured model is loaded and its engine healthy."""
        return (self.load_error is None and len(self.schedulers) == self.expected
                and all(s.engine.healthy() for s in self.schedulers.values()))

    @property
    def engine_failure(self) -> str | None:
        """Why a loaded model's engine can serve nothing any more (it could not recover)."""
        failed = [f"{name}: {s.engine.failure}" for name, s in self.schedulers.items()
                  if s.engine.failure]
        return "; ".join(failed) or None

    @property
    def scheduler(self) -> Scheduler | None:
        """The default model's scheduler (the first configured)."""
        return next(iter(self.schedulers.values()), None)

    @property
    def engine(self) -> Engine | None:
        default = self.scheduler
        return default.engine if default is not None else None

    def require(self, model: str | None = None) -> Scheduler:
        """The scheduler serving `model` (None: the default model)."""
        if model is not None and model in self.schedulers:
            return self.schedulers[model]
        if not self.schedulers:
            raise EngineUnavailable(self.load_error or "the model is still loading")
        if model is None:
            return next(iter(self.schedulers.values()))
        raise UnknownModel(f"unknown model {model!r}; this server has {self.models}",
                           param="model")

    @property
    def models(self) -> list[str]:
        return list(self.schedulers)

    def check_model(self, model: str | None) -> None:
        if model is not None and self.schedulers:
            self.require(model)

    def max_tokens_for(self, model: str | None = None) -> int:
        return self.require(model).engine.info.context_tokens - 1

    @property
    def max_tokens(self) -> int:
        engine = self.engine
        return engine.info.context_tokens - 1 if engine is not None else 0

    def limits(self) -> dict[str, int]:
        """The default model's limits (per-model ones come with each `start`)."""
        s = self.settings
        engine = self.engine
        context = engine.info.context_tokens if engine is not None else 0
        return {
            "max_message_bytes": s.max_message_bytes,
            "max_streams_per_connection": s.max_streams_per_connection,
            "context_tokens": context,
            "max_tokens": self.max_tokens,
            "default_max_tokens": min(s.default_max_tokens, self.max_tokens),
        }

    # ---- resumable streams: kept for a grace period while nobody reads them -------------
    def keep(self, session: GenerationSession) -> None:
        assert session.stream_token is not None
        self.resumable[session.stream_token] = session

    def orphan(self, session: GenerationSession) -> None:
        """Its reader went away: cancel and forget it unless resumed within the grace."""
        token = session.stream_token
        if token is None:
            return
        session.attach(None)
        self._cancel_grace(token)
        loop = asyncio.get_running_loop()
        self._grace[token] = loop.call_later(self.settings.resume_grace_s, self._expire, token)

    def adopt(self, token: str) -> GenerationSession | None:
        session = self.resumable.get(token)
        if session is not None:
            self._cancel_grace(token)
        return session

    def forget_when_read(self, session: GenerationSession) -> None:
        """A resumable session that ended and was read: keep it for the grace period only."""
        self.orphan(session)

    def _cancel_grace(self, token: str) -> None:
        handle = self._grace.pop(token, None)
        if handle is not None:
            handle.cancel()

    def _expire(self, token: str) -> None:
        self._grace.pop(token, None)
        session = self.resumable.pop(token, None)
        if session is not None:
            session.cancel()

    async def drain(self) -> None:
        """Graceful shutdown, before the server closes connections: refuse new work, let
        running generations finish up to the grace deadline, fail the rest with
        shutting_down, and close every socket with 1012 once its final frames are out.
        Bounded as a whole by the grace plus DRAIN_MARGIN_S: a socket whose client has
        not taken its frames by then is aborted, never waited for."""
        self.shutting_down = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.shutdown_grace_s + DRAIN_MARGIN_S
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.gather(*(s.aclose(self.settings.shutdown_grace_s)
                                       for s in self.schedulers.values()))
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
        self.shutting_down = True
        self.abort_connections()
        await asyncio.gather(*(s.aclose(0) for s in self.schedulers.values()))

    def abort_connections(self) -> None:
        """Every /ws connection still open goes now (shutdown past its deadline)."""
        for connection in list(self.connections):
            with contextlib.suppress(Exception):
                connection.abort()

    def close(self) -> None:
        for handle in self._grace.values():
            handle.cancel()
        self._grace.clear()
        for session in self.resumable.values():
            with contextlib.suppress(Exception):
                session.cancel()
        self.resumable.clear()
