"""The one start: every door turns its request into a GenerationRequest and calls
`ModelRegistry.start(request)`, which routes it by model, loads the model if it is not in
memory (load on demand), applies the context rule and admission (the model's Scheduler),
and hands back the session. A door never re-checks what the start checks; it only words
the errors in its own shape."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from ..engines.base import Embedded, EmbedInput, EngineInfo
from ..errors import (
    BadRequest,
    EngineError,
    EngineUnavailable,
    ShuttingDown,
    TokenpipeError,
    UnknownModel,
)
from ..scheduler import Scheduler
from ..session import GenerationSession
from ..types import FinishReason, GenerationRequest
from .doors import DOORS, api_labels
from .model_slots import ModelSlot, ModelState

log = logging.getLogger("tokenpipe.server")


@dataclass
class ModelRegistry:
    """The configured models by name, the first one the default; each loaded when first
    asked for (or at start), unloaded after its keep-alive, at most `max_loaded` in
    memory (0: no bound), the least recently used idle one evicted to make room."""

    slots: dict[str, ModelSlot] = field(default_factory=dict)
    load_error: str | None = None  # the configuration could not be read into models
    max_loaded: int = 0
    preloading: bool = False  # the start's loads are running
    # models come and go (--load-on-demand): only then may a client's keep-alive unload one
    clients_unload: bool = False
    # the metrics' `api` labels a start may carry: the doors' (create_app sets its table's)
    apis: frozenset[str] = field(default_factory=lambda: api_labels(DOORS))
    _room: asyncio.Event = field(default_factory=asyncio.Event)  # a loaded model went idle
    # the models a load in progress unloaded to make room: loaded again if that load fails
    _evicted: dict[str, list[ModelSlot]] = field(default_factory=dict)
    _restores: set[asyncio.Task[None]] = field(default_factory=set)
    _closing = False
    # requests waiting for their model's load, by the task that starts them
    _starts: dict[asyncio.Task[None], GenerationSession] = field(default_factory=dict)

    def add(self, slot: ModelSlot) -> None:
        slot.on_idle = self._went_idle
        slot.on_loaded = self._load_ended
        self.slots[slot.name] = slot

    def add_loaded(self, name: str, scheduler: Scheduler) -> None:
        """A model already loaded, under `name` (tests, a pre-built engine)."""
        slot = ModelSlot(name, lambda: scheduler.engine, lambda _: scheduler)
        slot.loaded(scheduler)
        self.add(slot)

    # ---- the one start ------------------------------------------------------------------
    async def start(self, request: GenerationRequest, *, resumable: bool = False,
                    api: str = "other") -> GenerationSession:
        """A running (or queued) session; raises, before anything runs, what the request
        cannot be: an unknown model, a context overflow, a full queue, a shutdown. A model
        not in memory is loaded: the session is handed back at once, queued and `loading`,
        and starts once the load is done (or fails with the load's reason). `api`: the door
        it came in by (its Door's label, doors.py), its metrics' label."""
        if api not in self.apis:  # a fixed set: a typo would be a new metrics series
            raise ValueError(f"api must be one of {sorted(self.apis)}, not {api!r}")
        slot = self.slot(request.model)
        if slot.state is ModelState.LOADED:
            assert slot.scheduler is not None
            slot.touch()
            return await slot.scheduler.start(request, resumable=resumable, api=api)
        slot.refuse_if_failed()
        session = GenerationSession.loading_model(slot.name, resumable=resumable, api=api)
        slot.pending += 1
        task = asyncio.create_task(self._start_loaded(slot, request, session),
                                   name=session.request_id)
        self._starts[task] = session
        task.add_done_callback(lambda t: self._starts.pop(t, None))
        session.bind_cancel(task.cancel)
        return session

    async def _start_loaded(self, slot: ModelSlot, request: GenerationRequest,
                            session: GenerationSession) -> None:
        try:
            scheduler = await slot.ensure(lambda: self._make_room(slot))
            await scheduler.start(request, resumable=session.resumable, into=session,
                                  api=session.api)
        except asyncio.CancelledError:
            session.finish(FinishReason.CANCELLED)
        except TokenpipeError as exc:
            session.fail(exc)
        except Exception as exc:  # defensive: a session always ends with one final event
            log.exception("starting %s on %s", session.request_id, slot.name)
            session.fail(EngineError(f"could not start: {type(exc).__name__}: {exc}"))
        finally:
            slot.done_waiting()

    async def count_tokens(self, request: GenerationRequest) -> int:
        """The prompt tokens start(request) would count, routed the same way (the model
        loaded first if it is not)."""
        slot = self.slot(request.model)
        slot.refuse_if_failed()
        slot.pending += 1
        try:
            scheduler = await slot.ensure(lambda: self._make_room(slot))
            return await scheduler.count_tokens(request)
        finally:
            slot.done_waiting()

    async def embed(self, model: str | None, inputs: list[EmbedInput], *,
                    truncate: bool = False, dimensions: int | None = None) -> Embedded:
        """The inputs' vectors from `model` (loaded first if it is not): a model whose
        engine does not embed, or `dimensions` other than its vectors' length, is refused
        (400 naming the field) before anything computes."""
        slot = self.slot(model)
        slot.refuse_if_failed()
        if slot.info is None or not slot.info.embeds:
            raise BadRequest(f"the model {slot.name!r} cannot make embeddings (its "
                             f"{slot.info.name if slot.info else ''} engine generates text "
                             "only); /v1/models lists the models that embed", param="model")
        slot.pending += 1
        try:
            engine = (await slot.ensure(lambda: self._make_room(slot))).engine
            size = engine.embedding_size
            if dimensions is not None and dimensions != size:
                raise BadRequest(f"the model {slot.name!r} makes vectors of {size} "
                                 f"dimensions and cannot shorten them: send dimensions "
                                 f"{size} or none", param="dimensions")
            return await engine.embed(inputs, truncate=truncate)
        finally:
            slot.done_waiting()

    # ---- routing ------------------------------------------------------------------------
    def slot(self, model: str | None = None) -> ModelSlot:
        """The slot serving `model` (None: the default model)."""
        if model is not None and model in self.slots:
            return self.slots[model]
        if not self.slots:
            raise EngineUnavailable(self.load_error or "the model is still loading")
        if model is None:
            return next(iter(self.slots.values()))
        self.check_serving()  # a server that can serve nothing says so first
        raise UnknownModel(f"unknown model {model!r}; this server has {self.names}",
                           param="model")

    def route(self, model: str | None = None) -> Scheduler:
        """The loaded scheduler serving `model`; EngineUnavailable where it is not loaded."""
        slot = self.slot(model)
        if slot.scheduler is None:
            raise EngineUnavailable(slot.error or f"{slot.name} is not loaded")
        return slot.scheduler

    def info(self, model: str | None = None) -> EngineInfo:
        """What a listing says of `model`: its engine's figures (as configured until it
        loads). EngineUnavailable where no model can serve (see `serving`)."""
        self.check_serving()
        info = self.slot(model).info
        assert info is not None
        return info

    def check_serving(self) -> None:
        """EngineUnavailable when no model can serve: the configuration failed, or every
        model's last load failed (listings say so, as /health does)."""
        if self.load_error or not self.slots:
            raise EngineUnavailable(self.load_error or "the model is still loading")
        if all(s.state is ModelState.FAILED for s in self.slots.values()):
            raise EngineUnavailable("could not load " + "; ".join(
                str(s.error) for s in self.slots.values()))

    async def load(self, model: str | None = None) -> None:
        """Loads `model` now if it is not (Ollama's "load the model" call); raises what a
        failed load raises."""
        slot = self.slot(model)
        slot.refuse_if_failed()
        slot.pending += 1
        try:
            await slot.ensure(lambda: self._make_room(slot))
        finally:
            slot.done_waiting()

    async def unload(self, model: str | None = None) -> None:
        """Unloads `model` now if it is loaded and idle (Ollama's keep_alive 0 call); a
        model with requests running or waiting unloads when they end (keep-alive 0)."""
        slot = self.slot(model)
        if slot.state is ModelState.LOADED and not slot.busy:
            await slot.unload()

    @property
    def names(self) -> list[str]:
        return list(self.slots)

    def states(self) -> dict[str, str]:
        return {name: slot.state.value for name, slot in self.slots.items()}

    @property
    def loaded(self) -> list[ModelSlot]:
        return [s for s in self.slots.values() if s.state is ModelState.LOADED]

    @property
    def ready(self) -> bool:
        """The start's loads are done and at least one model can serve: loaded with a
        healthy engine, or not failed (it loads on demand)."""
        return (self.load_error is None and bool(self.slots) and not self.preloading
                and any(self._can_serve(s) for s in self.slots.values()))

    @property
    def degraded(self) -> bool:
        """Some model cannot serve (its load failed, or its engine is down) while another
        can: /health stays 200 and says which."""
        return self.ready and not all(self._can_serve(s) for s in self.slots.values())

    @staticmethod
    def _can_serve(slot: ModelSlot) -> bool:
        if slot.state is ModelState.FAILED:
            return False
        return slot.scheduler is None or slot.scheduler.engine.healthy()

    def errors(self) -> dict[str, str]:
        """Each model that cannot serve now, and why."""
        out = {s.name: f"could not load {s.error}" for s in self.slots.values()
               if s.state is ModelState.FAILED}
        out.update({s.name: str(s.scheduler.engine.failure or "engine unhealthy")
                    for s in self.loaded if s.scheduler is not None
                    and not s.scheduler.engine.healthy()})
        return out

    @property
    def failure(self) -> str | None:
        """Why a model can serve nothing now: its load failed, or its engine could not
        recover from a fault."""
        failed = [f"could not load {s.error}" for s in self.slots.values()
                  if s.state is ModelState.FAILED]
        failed += [f"{s.name}: {s.scheduler.engine.failure}" for s in self.loaded
                   if s.scheduler is not None and s.scheduler.engine.failure]
        return "; ".join(failed) or None

    def limits(self, max_message_bytes: int, max_streams_per_connection: int,
               default_max_tokens: int) -> dict[str, int]:
        """The default model's limits, as tokenpipe.v1's hello states them."""
        default = next(iter(self.slots.values()), None)
        info = default.info if default is not None else None
        context = info.context_tokens if info is not None else 0
        max_tokens = max(0, context - 1)
        if default is not None and default.scheduler is not None:
            default_max_tokens = min(default_max_tokens, default.scheduler.default_max_tokens)
        return {
            "max_message_bytes": max_message_bytes,
            "max_streams_per_connection": max_streams_per_connection,
            "context_tokens": context,
            "max_tokens": max_tokens,
            "default_max_tokens": min(default_max_tokens, max_tokens),
        }

    # ---- loading and unloading ----------------------------------------------------------
    async def preload(self, names: list[str]) -> None:
        """The start's loads, together; a failure is kept on its slot (and logged)."""
        self.preloading = True
        try:
            await asyncio.gather(*(self._preload(self.slots[n]) for n in names))
            # an engine may learn its model's name as it loads (openai: the upstream's)
            self.slots = {(s.info.model_id if s.info and s.state is ModelState.LOADED
                           else s.name): s for s in self.slots.values()}
            for name, slot in self.slots.items():
                slot.name = name
        finally:
            self.preloading = False

    async def _preload(self, slot: ModelSlot) -> None:
        slot.pending += 1
        try:
            with contextlib.suppress(EngineUnavailable):
                await slot.ensure()
        finally:
            slot.done_waiting()

    async def _make_room(self, loading: ModelSlot) -> None:
        """Before `loading` loads: while max_loaded models are in memory (or loading),
        unload the least recently used idle one, or wait until one is idle. A model with
        requests running or waiting is never unloaded."""
        if self.max_loaded <= 0:
            return
        while True:
            held = [s for s in self.slots.values() if s is not loading and s.in_memory]
            if len(held) < self.max_loaded:
                return
            idle = sorted((s for s in held if s.state is ModelState.LOADED and not s.busy),
                          key=lambda s: s.last_used)
            if idle and loading.error is not None:  # its retry may fail again: no eviction
                raise EngineUnavailable(f"could not load {loading.error} (not retried while "
                                        "that would unload a loaded model)")
            if idle:
                self._evicted.setdefault(loading.name, []).append(idle[0])
                log.info("unloading %s to load %s (--max-loaded-models %d)", idle[0].name,
                         loading.name, self.max_loaded)
                await idle[0].unload()
                continue
            self._room.clear()
            await self._room.wait()

    def _went_idle(self, slot: ModelSlot) -> None:
        self._room.set()

    def _load_ended(self, slot: ModelSlot, ok: bool) -> None:
        """A failed load gives back what it evicted: those models load again."""
        for evicted in self._evicted.pop(slot.name, []):
            if not ok and not self._closing and evicted.state is ModelState.AVAILABLE:
                log.info("loading %s again: the load of %s it made room for failed",
                         evicted.name, slot.name)
                task = asyncio.create_task(self._restore(evicted), name=f"restore {evicted.name}")
                self._restores.add(task)
                task.add_done_callback(self._restores.discard)

    async def _restore(self, slot: ModelSlot) -> None:
        slot.pending += 1
        try:
            with contextlib.suppress(EngineUnavailable):
                await slot.ensure(lambda: self._make_room(slot))
        finally:
            slot.done_waiting()

    async def aclose(self, grace_s: float) -> None:
        """Every model refuses new work; running generations get `grace_s` to end."""
        self._closing = True
        for task, session in list(self._starts.items()):
            session.fail(ShuttingDown("the server shut down before this answer began"))
            task.cancel()
        for restore in list(self._restores):
            restore.cancel()
        await asyncio.gather(*(s.aclose(grace_s) for s in self.slots.values()))

    async def free(self) -> None:
        """Shutdown's last step: every loaded engine frees its model."""
        for slot in self.slots.values():
            if slot.scheduler is not None:
                await slot.scheduler.engine.aclose()
