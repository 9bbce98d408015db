"""Admission between sessions and the engine: the context rule, a bound on running
generations, a bounded FIFO queue with positions, cancellation that frees a slot at once,
and the one place where an engine failure becomes a session's Failed event.

The context rule, the same for every door: an explicit max_tokens is at most the context
less one (checked before any tokenizing), prompt plus max_tokens fit the context (the
engine's prepare()), and the prompt has at most --max-prompt-tokens.
Each is a ContextOverflow whose `param` is the core's name: max_tokens, messages or prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from .constrain import compile_pool
from .constrain.repeats import repeated_calls
from .constrain.tools import tool_call_splitter
from .engines.base import Engine, PreparedRequest, constrained
from .errors import (
    ContextOverflow,
    EngineError,
    Overloaded,
    ShuttingDown,
    TokenpipeError,
)
from .logprobs import LogprobAligner, attach
from .metrics import Metrics
from .sampling_defaults import applied
from .session import Failed, GenerationSession
from .text import ReasoningSplitter, StopMatcher
from .types import (
    EngineFinish,
    EngineParts,
    EngineProgress,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    Part,
)

log = logging.getLogger("tokenpipe.scheduler")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"  # the thinking section's tags
# Requests up to this many characters are templated and tokenized in place (tens of
# microseconds; a thread hop would cost more); larger ones in a worker thread.
INLINE_PROMPT_CHARS = 16384


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        *,
        max_running: int | None = None,
        max_queue: int = 64,
        default_max_tokens: int = 512,
        max_prompt_tokens: int | None = None,
        metrics: Metrics | None = None,
        sampling_defaults: Mapping[str, Any] | None = None,
    ) -> None:
        self.engine = engine
        # the model table's temperature, stop, ...: for each field a request leaves out
        self.sampling_defaults = dict(sampling_defaults or {})
        self.max_running = max_running or engine.info.max_batch
        self.max_queue = max_queue
        self.default_max_tokens = default_max_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.metrics = metrics
        if metrics is not None:
            model = engine.info.model_id
            metrics.active.labels(model).set_function(lambda: self.running)
            metrics.queued.labels(model).set_function(lambda: len(self._waiting))
            metrics.engines.watch(model, engine)
        self.running = 0
        self._waiting: deque[tuple[GenerationSession, asyncio.Future[None]]] = deque()
        self._tasks: dict[asyncio.Task[None], GenerationSession] = {}
        self._closing = False
        self.on_idle: Callable[[], None] | None = None  # told when the last generation ends

    @property
    def busy(self) -> bool:
        """Generations run or wait here."""
        return bool(self._tasks)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def max_tokens(self) -> int:
        """The most an answer may ask for: the context less the one token of a prompt."""
        return self.engine.info.context_tokens - 1

    def _check_max_tokens(self, request: GenerationRequest) -> None:
        asked = request.params.max_tokens
        if asked is not None and asked > self.max_tokens:
            raise ContextOverflow(
                f"max_tokens ({asked}) exceeds the context of "
                f"{self.engine.info.context_tokens} tokens: limits.max_tokens is "
                f"{self.max_tokens}", param="max_tokens")

    async def start(self, request: GenerationRequest, *, resumable: bool = False,
                    into: GenerationSession | None = None, api: str = "other"
                    ) -> GenerationSession:
        """submit() (`into`: a session made while the model loaded); a long prompt is prepared
        in a worker thread (a megabyte takes the tokenizer a good part of a second: a stall of
        every stream on the loop), one with a grammar in the grammar pool (compile_pool.py)."""
        if self._closing:
            raise ShuttingDown("the server is shutting down")
        request = applied(request, self.sampling_defaults)
        self._check_max_tokens(request)
        prepared = None
        if constrained(request):  # a grammar compiles in its own pool, under a deadline
            prepared = await compile_pool.prepare(self.engine, request, self.default_max_tokens)
        elif request.prompt_chars() > INLINE_PROMPT_CHARS:
            prepared = await asyncio.to_thread(self.engine.prepare, request,
                                               self.default_max_tokens)
        return self.submit(request, resumable=resumable, prepared=prepared, into=into, api=api)

    async def count_tokens(self, request: GenerationRequest) -> int:
        """The prompt's tokens as start() counts them (the engine's template, then its
        encoding: what prepare() does), with no limit applied; a long prompt is counted in
        a worker thread, as start() prepares it. EngineError where the engine has no
        tokenizer (openai: its upstream counts)."""
        if self._closing:
            raise ShuttingDown("the server is shutting down")
        if request.prompt_chars() > INLINE_PROMPT_CHARS:
            return await asyncio.to_thread(self._count, request)
        return self._count(request)

    def _count(self, request: GenerationRequest) -> int:
        return len(self.engine.encode(request, self.engine.render(request)))

    def submit(self, request: GenerationRequest, *, resumable: bool = False,
               prepared: PreparedRequest | None = None,
               into: GenerationSession | None = None, api: str = "other"
               ) -> GenerationSession:
        """Checks the request and starts it (or queues it). Raises before anything runs.
        `into`: the session to run it in (made while its model loaded), else a new one;
        `api`: the door it came in by (its metrics' label)."""
        if self._closing:
            raise ShuttingDown("the server is shutting down")
        if prepared is None:
            request = applied(request, self.sampling_defaults)
            self._check_max_tokens(request)
            prepared = self.engine.prepare(request, self.default_max_tokens)
        if self.max_prompt_tokens is not None and prepared.prompt_tokens > self.max_prompt_tokens:
            raise ContextOverflow(
                f"the prompt has {prepared.prompt_tokens} tokens; this server accepts at most "
                f"{self.max_prompt_tokens}",
                param="prompt" if request.prompt is not None else "messages")
        if into is None:
            session = GenerationSession(prepared, self.engine.info.model_id,
                                        resumable=resumable, api=api)
        else:
            session = into
            session.attach(prepared, self.engine.info.model_id)
        # Admission is decided here, synchronously, so that the bound holds however many
        # requests arrive before their tasks first run.
        admission: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        now = self.running < self.max_running and not self._waiting
        if now:
            self.running += 1
            admission.set_result(None)
        elif len(self._waiting) >= self.max_queue:
            raise Overloaded(
                f"{self.running} generations running and {len(self._waiting)} queued",
                retry_after_ms=1000,
            )
        else:
            self._waiting.append((session, admission))
            session.set_position(len(self._waiting))
        task = asyncio.create_task(self._run(session, admission), name=session.request_id)
        self._tasks[task] = session
        task.add_done_callback(lambda t: self._done(t, session, admission))
        session.bind_cancel(task.cancel)
        if now:
            self.engine.begin(prepared)
        return session

    def _done(
        self, task: asyncio.Task[None], session: GenerationSession,
        admission: asyncio.Future[None],
    ) -> None:
        self._tasks.pop(task, None)
        if not self._tasks and self.on_idle is not None:
            self.on_idle()
        if session.final is None:  # cancelled before its first step: _run never ran
            self.engine.forget(session.prepared)
            if admission.done() and not admission.cancelled():
                self._release()
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove((session, admission))
                    self._renumber()
                admission.cancel()
            session.finish(FinishReason.CANCELLED)
            self._observe(session)

    async def aclose(self, deadline_s: float = 0.0) -> None:
        """Refuses new work; lets running generations finish up to the deadline, then fails
        the rest with shutting_down."""
        self._closing = True
        if self._tasks and deadline_s > 0:
            await asyncio.wait(set(self._tasks), timeout=deadline_s)
        for task, session in list(self._tasks.items()):
            session.fail(ShuttingDown("the server shut down before this answer ended"))
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    async def _admit(self, session: GenerationSession, admission: asyncio.Future[None]) -> None:
        try:
            await admission
        except BaseException:
            if admission.done() and not admission.cancelled():
                self._release()  # admitted and cancelled in the same moment
            else:
                entry = (session, admission)
                with contextlib.suppress(ValueError):
                    self._waiting.remove(entry)
                    self._renumber()
            raise

    def _release(self) -> None:
        self.running -= 1
        while self._waiting and self.running < self.max_running:
            _, future = self._waiting.popleft()
            if not future.done():
                self.running += 1
                future.set_result(None)
        self._renumber()

    def _renumber(self) -> None:
        for i, (waiting, _) in enumerate(self._waiting, start=1):
            waiting.set_position(i)

    async def _run(self, session: GenerationSession, admission: asyncio.Future[None]) -> None:
        admitted = False
        try:
            await self._admit(session, admission)
            admitted = True
            await self._generate(session)
        except asyncio.CancelledError:
            session.finish(FinishReason.CANCELLED)  # no-op if shutdown already failed it
        except TokenpipeError as exc:
            session.fail(exc)
        except Exception as exc:
            log.exception("engine failure in %s", session.request_id)
            session.fail(EngineError(f"engine failure: {type(exc).__name__}: {exc}"))
        finally:
            if admitted:
                self._release()
            if session.final is None:  # defensive: every session ends with one final event
                session.fail(EngineError("generation ended without a result"))
            self._observe(session)

    def _observe(self, session: GenerationSession) -> None:
        """Metrics and the one log line per generation, keyed by its request id."""
        final = session.final
        usage = session.usage()
        if isinstance(final, Failed):
            log.warning("%s failed: %s: %s", session.request_id, final.error.code,
                        final.error.message,
                        extra={"request_id": session.request_id, "code": final.error.code})
        elif final is not None:
            t = final.timing
            log.info("%s %s: %d prompt + %d completion tokens, ttft %s ms, total %.0f ms",
                     session.request_id, final.reason.value, usage.prompt_tokens,
                     usage.completion_tokens, t.ttft_ms, t.total_ms,
                     extra={"request_id": session.request_id,
                            "finish_reason": final.reason.value,
                            "prompt_tokens": usage.prompt_tokens,
                            "completion_tokens": usage.completion_tokens,
                            "ttft_ms": t.ttft_ms, "total_ms": t.total_ms})
        m = self.metrics
        if m is None or final is None:
            return
        api = session.api
        m.tokens.labels(api).inc(usage.completion_tokens)
        if usage.drafted_tokens:
            m.drafted.labels(api).inc(usage.drafted_tokens)
            m.accepted.labels(api).inc(usage.accepted_tokens)
        if session.started_at is not None:
            m.prompt_tokens.labels(api).inc(usage.prompt_tokens)
        if session.first_token_at is not None:
            m.ttft.labels(api).observe(session.first_token_at - session.created)
        if isinstance(final, Failed):
            m.errors.labels(final.error.code, api).inc()
        else:
            m.finished.labels(final.reason.value, api).inc()
            if final.reason is FinishReason.CANCELLED:
                m.cancellations.labels(api).inc()

    async def _generate(self, session: GenerationSession) -> None:
        prepared = session.prepared
        stop = StopMatcher(prepared.request.params.stop)
        request = prepared.request
        # A thinking section goes to the reasoning channel, tool calls to theirs, as they
        # stream; stop strings apply to the content (a call is never cut: its arguments
        # stay whole). Without either, text goes straight through the stop matcher.
        reason = None
        if request.split_reasoning:
            inside = prepared.prompt_text.rstrip().endswith(THINK_OPEN)
            reason = ReasoningSplitter(THINK_OPEN, THINK_CLOSE, inside=inside)
        split = tool_call_splitter() if request.tools and not self.engine.splits_calls else None
        repeats = repeated_calls(request)  # several calls allowed: ends at a repeated one
        # Logprobs asked: content goes through the aligner, which wraps the stop matcher
        # and knows which tokens the released text completes.
        aligner = LogprobAligner(stop) if request.params.logprobs is not None else None
        stop_feed = stop.feed if aligner is None else aligner.feed

        def route(pieces: list[str | Part]) -> list[str | Part]:
            if split is not None:
                pieces = [q for p in pieces
                          for q in (split.feed(p) if isinstance(p, str) else [p])]
            pieces = repeats.feed(pieces) if repeats is not None else pieces
            return [stop_feed(p) if isinstance(p, str) else p for p in pieces]

        def flushed() -> list[str | Part]:
            pieces = route(reason.flush()) if reason is not None else []
            if split is not None:
                pieces += route(split.flush())
            pieces += repeats.flush() if repeats is not None else []
            return [*pieces, stop.flush() if aligner is None else aligner.flush()]

        plain = reason is None and split is None and aligner is None and repeats is None
        keep_ids = request.token_ids or session.resumable  # a take-over goes on from them
        # No prompt_ids: the engine counts the prompt elsewhere (openai: the upstream)
        session.mark_started(prepared.prompt_tokens or None)
        stream = self.engine.stream(prepared)
        try:
            itl = self.metrics.itl.labels(session.api) if self.metrics is not None else None
            last = 0.0  # the first text has no gap before it (that is time to first token)
            async for event in stream:
                if isinstance(event, EngineText):
                    if event.drafted:  # counted as they come: a stop string ends it early
                        session.drafted_tokens += event.drafted
                        session.accepted_tokens += event.accepted
                    if itl is not None and event.text:
                        now = time.perf_counter()
                        if last:
                            itl.observe(now - last)
                        last = now
                    if plain:
                        session.add_text(stop.feed(event.text), event.tokens,
                                         event.token_ids if keep_ids else ())
                    else:
                        if aligner is not None:
                            aligner.engine_text(event.text, event.logprobs)
                        pieces = route(reason.feed(event.text) if reason is not None
                                       else [event.text])
                        if reason is not None and (reason.thinking or _reasoned(pieces)):
                            session.reasoning_tokens += event.tokens
                        if aligner is not None:
                            pieces = attach(pieces, aligner.take(stop.stopped))
                        session.add_pieces(pieces, event.tokens,
                                           event.token_ids if keep_ids else ())
                    if stop.stopped:
                        session.finish(FinishReason.STOP, stop.matched)
                        return
                elif isinstance(event, EngineParts):  # calls the engine got apart
                    parts: list[str | Part] = list(event.parts)
                    session.add_pieces(repeats.feed(parts) if repeats else parts, event.tokens)
                elif isinstance(event, EngineFinish):
                    if session.prompt_tokens is None:
                        session.prompt_tokens = event.usage.prompt_tokens
                    session.cached_tokens = event.usage.cached_tokens
                    finish = event.reason
                    if plain:
                        session.add_text(stop.flush(), 0)
                    else:
                        pieces = flushed()
                        if aligner is not None:
                            pieces = attach(pieces, aligner.take(True))
                        session.add_pieces(pieces, 0)
                        if split is not None and split.calls and finish is FinishReason.STOP:
                            finish = FinishReason.TOOL_CALLS
                    session.finish(finish)
                    return
                elif isinstance(event, EngineStart):  # (the openai engine's second: ids)
                    session.prompt_tokens = event.prompt_tokens or session.prompt_tokens
                    if keep_ids:
                        session.prompt_ids = event.prompt_ids or tuple(prepared.prompt_ids) or None
                elif isinstance(event, EngineProgress):
                    session.set_progress(event.done, event.total)
                if repeats is not None and repeats.repeated:  # the model began a call again
                    session.finish(FinishReason.TOOL_CALLS)
                    return
            raise EngineError("the engine stream ended without a finish")
        finally:
            # Closing the engine's stream is what stops its compute (cancel, stop, error).
            await stream.aclose()  # type: ignore[attr-defined]


def _reasoned(pieces: list[str | Part]) -> bool:
    """Some of this token's text went to the reasoning channel (usage counts it there)."""
    return any(isinstance(p, Part) and p.channel == "reasoning" for p in pieces)
