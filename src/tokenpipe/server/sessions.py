"""The one start: every door turns its request into a GenerationRequest and calls
`ModelRegistry.start(request)`, which routes it by model, applies the context rule and
admission (the model's Scheduler), and hands back the session. A door never re-checks
what the start checks; it only words the errors in its own shape."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..errors import EngineUnavailable, UnknownModel
from ..scheduler import Scheduler
from ..session import GenerationSession
from ..types import GenerationRequest


@dataclass
class ModelRegistry:
    """The loaded models by name, the first one the default."""

    schedulers: dict[str, Scheduler] = field(default_factory=dict)
    load_error: str | None = None
    expected: int = 1  # models configured

    async def start(self, request: GenerationRequest, *,
                    resumable: bool = False) -> GenerationSession:
        """A running (or queued) session; raises, before anything runs, what the request
        cannot be: an unknown model, a context overflow, a full queue, a shutdown."""
        return await self.route(request.model).start(request, resumable=resumable)

    async def count_tokens(self, request: GenerationRequest) -> int:
        """The prompt tokens start(request) would count, routed the same way."""
        return await self.route(request.model).count_tokens(request)

    def route(self, model: str | None = None) -> Scheduler:
        """The scheduler serving `model` (None: the default model)."""
        if model is not None and model in self.schedulers:
            return self.schedulers[model]
        if not self.schedulers:
            raise EngineUnavailable(self.load_error or "the model is still loading")
        if model is None:
            return next(iter(self.schedulers.values()))
        raise UnknownModel(f"unknown model {model!r}; this server has {self.names}",
                           param="model")

    @property
    def names(self) -> list[str]:
        return list(self.schedulers)

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

    def limits(self, max_message_bytes: int, max_streams_per_connection: int,
               default_max_tokens: int) -> dict[str, int]:
        """The default model's limits, as tokenpipe.v1's hello states them."""
        default = next(iter(self.schedulers.values()), None)
        context = default.engine.info.context_tokens if default is not None else 0
        max_tokens = default.max_tokens if default is not None else 0
        return {
            "max_message_bytes": max_message_bytes,
            "max_streams_per_connection": max_streams_per_connection,
            "context_tokens": context,
            "max_tokens": max_tokens,
            "default_max_tokens": min(default_max_tokens, max_tokens),
        }

    async def aclose(self, grace_s: float) -> None:
        """Every scheduler refuses new work; running generations get `grace_s` to end."""
        await asyncio.gather(*(s.aclose(grace_s) for s in self.schedulers.values()))
