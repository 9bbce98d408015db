"""One served model's life: available (configured, not in memory), loading, loaded, and back
to available when its keep-alive passes idle or the registry evicts it for another model.

A slot builds a fresh engine for each load (off the event loop: engines load in threads),
so an unloaded model's memory is freed and a later load starts clean. A load is shared by
every request that waits for it and is never cancelled by one of them leaving. A failed
load fails the requests that waited for it, with the reason; the next request after
LOAD_RETRY_S tries again (the file may have been fixed), the ones before it fail at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..engines.base import Engine, EngineInfo
from ..errors import EngineUnavailable
from ..scheduler import Scheduler

log = logging.getLogger("tokenpipe.server")
LOAD_RETRY_S = 10.0  # after a failed load, requests fail at once for this long


class ModelState(enum.Enum):
    AVAILABLE = "available"  # configured, not in memory (never loaded, or unloaded)
    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"  # its last load failed (`error` says why); a later request retries


@dataclass(eq=False)
class ModelSlot:
    """A configured model: `make` builds its engine (not loaded), `schedule` wraps a loaded
    engine in its Scheduler. keep_alive_s < 0: stays loaded once loaded."""

    name: str
    make: Callable[[], Engine]
    schedule: Callable[[Engine], Scheduler]
    keep_alive_s: float = -1.0
    keep_alive_once: float | None = None  # a request's own keep-alive, for the next idle
    scheduler: Scheduler | None = None
    error: str | None = None
    last_used: float = field(default_factory=time.monotonic)
    pending: int = 0  # requests waiting for this model's load
    info: EngineInfo | None = None  # the engine's info: before a load, as configured
    # told when its last request ends, or its memory is freed (unloaded, a load failed)
    on_idle: Callable[[ModelSlot], None] | None = None
    on_loaded: Callable[[ModelSlot, bool], None] | None = None  # a load ended: ok or not
    _loading: asyncio.Task[Scheduler] | None = None
    _unloading: asyncio.Task[None] | None = None
    _failed_at: float = 0.0
    _admitted = False  # its load passed the registry's room check: it holds memory
    _timer: asyncio.TimerHandle | None = None

    def __post_init__(self) -> None:
        if self.info is None:
            self.info = self.make().info

    @property
    def state(self) -> ModelState:
        if self.scheduler is not None and self._unloading is None:
            return ModelState.LOADED
        if self._loading is not None or (self.pending and self.scheduler is None):
            return ModelState.LOADING  # or about to: requests wait for it
        return ModelState.FAILED if self.error is not None else ModelState.AVAILABLE

    @property
    def busy(self) -> bool:
        """Requests wait for it or run on it: never unloaded now."""
        return self.pending > 0 or (self.scheduler is not None and self.scheduler.busy)

    @property
    def expires_at(self) -> float | None:
        """When an idle loaded model unloads (time.time()), None: not scheduled."""
        if self._timer is None:
            return None
        return time.time() + max(0.0, self._timer.when() - asyncio.get_running_loop().time())

    def touch(self) -> None:
        """A request for this model: it is the most recently used, its idle timer stops."""
        self.last_used = time.monotonic()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def refuse_if_failed(self) -> None:
        """EngineUnavailable at once while a failed load is recent (the reason included)."""
        if self.error is not None and time.monotonic() - self._failed_at < LOAD_RETRY_S:
            raise EngineUnavailable(self.error)

    async def ensure(self, before_load: Callable[[], Awaitable[None]] | None = None,
                     ) -> Scheduler:
        """The loaded model's scheduler: now if loaded, else once the (shared) load ends.
        `before_load` runs first when this call starts a load (the registry's eviction)."""
        self.touch()
        if self._unloading is not None:
            await asyncio.shield(self._unloading)
        if self.scheduler is not None:
            return self.scheduler
        if self._loading is None:
            self._loading = asyncio.create_task(self._load(before_load),
                                                name=f"load {self.name}")
        return await asyncio.shield(self._loading)

    async def _load(self, before_load: Callable[[], Awaitable[None]] | None) -> Scheduler:
        try:
            if before_load is not None:
                await before_load()
            self._admitted = True
            engine = self.make()
            started = time.perf_counter()
            log.info("loading %s", self.name)
            try:
                await engine.load()
            except asyncio.CancelledError:
                await engine.aclose()
                raise
            except Exception as exc:
                with contextlib.suppress(Exception):
                    await engine.aclose()
                self.error = f"{self.name}: {type(exc).__name__}: {exc}"
                self._failed_at = time.monotonic()
                log.error("could not load %s", self.error)
                raise EngineUnavailable(f"could not load {self.error}") from None
            self.error = None
            self.info = engine.info
            self.scheduler = scheduler = self.schedule(engine)
            scheduler.on_idle = self._idle
            log.info("ready: engine=%s model=%s context=%d batch=%d (loaded in %.2f s)",
                     engine.info.name, engine.info.model_id, engine.info.context_tokens,
                     engine.info.max_batch, time.perf_counter() - started)
            return scheduler
        finally:
            self._loading = None
            self._admitted = self.scheduler is not None
            if not self._admitted:
                self._room_freed()  # a failed load holds no memory: a waiting load may go
            if self.on_loaded is not None:
                self.on_loaded(self, self._admitted)

    @property
    def in_memory(self) -> bool:
        """Loaded, or loading past the room check (what --max-loaded-models counts)."""
        return self.scheduler is not None or self._admitted

    def loaded(self, scheduler: Scheduler) -> None:
        """Takes a scheduler built elsewhere (tests, a pre-built engine) as this slot's."""
        self.scheduler, self.info, self.error = scheduler, scheduler.engine.info, None
        scheduler.on_idle = self._idle

    def done_waiting(self) -> None:
        """A request that waited for the load has its answer (or went away)."""
        self.pending -= 1
        if not self.busy:
            self._idle()

    def _idle(self) -> None:
        """Its last request ended: the keep-alive timer starts; the registry may evict it."""
        if self.busy or self.scheduler is None:
            return
        keep = self.keep_alive_s if self.keep_alive_once is None else self.keep_alive_once
        self.keep_alive_once = None
        if keep >= 0 and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(keep, self._expire, keep)
        if self.on_idle is not None:
            self.on_idle(self)

    def _expire(self, keep: float) -> None:
        self._timer = None
        if not self.busy and self.scheduler is not None:
            log.info("unloading %s: idle for %g s (keep-alive)", self.name, keep)
            self.unload()

    def unload(self) -> asyncio.Task[None]:
        """Frees the model (only while not busy; the caller checks). Requests that come
        while it is freed wait for it, then load it afresh."""
        if self._unloading is None:
            self._unloading = asyncio.create_task(self._unload(), name=f"unload {self.name}")
        return self._unloading

    async def _unload(self) -> None:
        scheduler = self.scheduler
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            if scheduler is not None:
                await scheduler.aclose(0)
                await scheduler.engine.aclose()
        finally:
            self.scheduler = None
            self._unloading = None
            self._admitted = False
            log.info("unloaded %s", self.name)
            self._room_freed()

    def _room_freed(self) -> None:
        if self.on_idle is not None:
            self.on_idle(self)

    async def aclose(self, grace_s: float) -> None:
        """Shutdown: no new work; running generations get `grace_s` to end."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._loading is not None:
            self._loading.cancel()
            with contextlib.suppress(BaseException):
                await self._loading
        if self._unloading is not None:
            with contextlib.suppress(BaseException):
                await self._unloading
        if self.scheduler is not None:
            await self.scheduler.aclose(grace_s)
