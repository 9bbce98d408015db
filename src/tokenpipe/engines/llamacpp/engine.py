"""llama.cpp through llama-cpp-python's low-level API, with continuous batching.

One decode thread owns the llama context. Sequences join between steps; each step is one
llama_decode holding one token per decoding sequence plus a chunk of at most one waiting
prompt, so a new prompt never stalls the others for long. The prompt cache's
slots: slots.py; the KV cache's tiers (a split one for what fits a stream, a shared one for
longer conversations): tiers.py.
Tokens reach asyncio through call_soon_threadsafe, once per step for all sequences.
A token's arithmetic does not depend on what shares its step (--determinism, default exact:
exact.py picks the kernels), so the caches and the batching never change an answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

from ...constrain import Guides, build_in_background, grammar_for
from ...errors import EngineError, EngineUnavailable, MissingDependency
from ...logprobs import token_logprob
from ...types import (
    EngineEvent,
    EngineFinish,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    Usage,
)
from ..base import (
    DEFAULT_CONTEXT,
    Embedded,
    EmbedInput,
    Engine,
    EngineInfo,
    EngineOptions,
    PreparedRequest,
    bundled_model_path,
    drain,
    hand_over,
    opens_thinking,
)
from . import decode_steps, exact, threadpool
from .embed import EMBED_WINDOW, Embedder, EmbedWorker
from .progress import progress
from .sampler import make_sampler
from .slots import Seq, Slots
from .tiers import Tier, default_cells, layout, move_prefix, per_sequence, tier_for
from .vocab import Vocab

try:
    import llama_cpp as lc
    import numpy as np
    from llama_cpp import _logger as llama_logger
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependency(
        f"the llamacpp engine needs llama-cpp-python ({exc.name} is missing): "
        "pip install 'tokenpipe[llamacpp]'"
    ) from None

log = logging.getLogger("tokenpipe.llamacpp")

PROMPT_CHUNK = 512  # prompt tokens per step while other sequences are decoding
_Row = tuple[Seq, int, int, bool]  # (sequence, token, position, wants logits)


class LlamaCppEngine(Engine):
    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.model_path = Path(options.model) if options.model else None
        model_id = options.model_id or (
            self.model_path.stem if self.model_path else "SmolLM2-135M-Instruct"
        )
        self.parallel = max(1, options.parallel)
        if options.determinism not in exact.MODES:
            raise EngineError(f"determinism must be one of {', '.join(exact.MODES)}, "
                              f"not {options.determinism!r}")
        self.determinism = options.determinism
        self.rows_exact: bool | None = None  # the load-time check's verdict (None: not run)
        cells = options.context_size or default_cells(options.kv_cache, self.parallel,
                                                      DEFAULT_CONTEXT)  # until load
        self._layout = layout(options.kv_cache, cells, self.parallel)
        self.info = EngineInfo("llamacpp", model_id,
                               per_sequence(options.kv_cache, cells, self.parallel), self.parallel,
                               embeds=True)
        self._inbox: queue.SimpleQueue[Seq] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self.failures = 0  # decode-loop faults that ended the generations in flight
        self.restarts = 0  # fresh contexts after such a fault
        self._tiers: list[Tier] = []
        self._pool: threadpool.Threadpool | None = None
        self._slot_sets = [Slots(self.parallel) for _ in self._layout]  # a Slots a tier
        self._embeds: EmbedWorker | None = None  # after load

    logprobs = True  # the log-softmax of the row each token is sampled from

    @classmethod
    def from_options(cls, options: EngineOptions) -> LlamaCppEngine:
        return cls(options)

    # ---- loading ------------------------------------------------------------------------
    async def load(self) -> None:
        await asyncio.to_thread(self._load)
        self._thread = threading.Thread(target=self._run, name="llamacpp-decode", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        path = self.model_path or bundled_model_path()
        if not path.is_file():
            raise EngineError(f"model file not found: {path}")
        # llama.cpp prints every tensor it loads; keep that for --log-level debug only.
        llama_logger.set_verbose(log.isEnabledFor(logging.DEBUG))
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        exact.model_params(self.determinism, mparams)  # determinism: the weights
        self._model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise EngineError(f"llama.cpp could not load {path}")
        self._vocab = Vocab(self._model, self.options.chat_template)
        if self.options.context_size is None:  # the model's own trained context
            self._layout = layout(self.options.kv_cache, default_cells(
                self.options.kv_cache, self.parallel, lc.llama_model_n_ctx_train(self._model)),
                self.parallel)
        self.model_path = path
        # the grammar library's view of the vocabulary (~0.4 s): built beside the rest of
        # the load, awaited by the first request with an output format
        vocab = self._vocab
        self._guides = build_in_background(
            lambda: Guides.for_llamacpp(vocab.handle, vocab.n_tokens), "llamacpp-guides")
        self._new_context()
        self._embeds = EmbedWorker(Embedder(
            self._model, self._vocab.n_tokens, self._threads,
            min(EMBED_WINDOW, lc.llama_model_n_ctx_train(self._model))),
            lambda text: self._vocab.tokenize(text, add_special=True))  # as llama-server
        log.info("loaded %s: context %d (%s), %d sequences, %d threads", path.name,
                 sum(cells for _, cells in self._layout),
                 " + ".join(t.label for t in self._tiers),
                 self.parallel, self._threads)

    def _new_context(self) -> None:
        """Fresh contexts (a tier each), batches and thread pool for the loaded model (at
        load, and when the engine recovers from a fault: the old state is unknown then)."""
        self._threads = self.options.threads or os.cpu_count() or 1
        self._pool = threadpool.create(self._threads)
        for (shared, cells), slots in zip(self._layout, self._slot_sets, strict=True):
            tier = Tier.open(self._model, self.options, slots, shared=shared, cells=cells,
                             threads=self._threads, batch_min=PROMPT_CHUNK + self.parallel)
            self._tiers.append(tier)
            if self._pool is not None:
                self._pool.attach(tier.context.ctx)
        self._batch_cap = min(t.context.batch_cap for t in self._tiers)
        self.info = EngineInfo("llamacpp", self.info.model_id,
                               max(t.context.context_tokens for t in self._tiers), self.parallel,
                               embeds=True)
        verdicts = [exact.check(self.determinism, t.context, self._vocab.n_tokens,
                                self.parallel) for t in self._tiers]
        self.rows_exact = None if verdicts[0] is None else all(verdicts)

    def check_output(self, request: GenerationRequest) -> None:
        for inside in (False, True) if request.reasoning_budget is not None else (False,):
            grammar = grammar_for(request, inside=inside)  # both: the prompt decides
            assert grammar is not None
            self._guides.result().check(*grammar)

    # ---- text ---------------------------------------------------------------------------
    def render(self, request: GenerationRequest) -> str:
        return self._vocab.render(request)

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        return self._vocab.tokenize(text, add_special=add_special)

    def encode(self, request: GenerationRequest, text: str) -> list[int]:
        # a raw completion gets the model's BOS, as llama.cpp adds it
        return self._vocab.tokenize(text, add_special=request.prompt is not None)

    # ---- streaming (event loop side) ----------------------------------------------------
    def healthy(self) -> bool:
        return self._failure is None and self._thread is not None and self._thread.is_alive()

    @property
    def failure(self) -> str | None:
        return self._failure

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        if not self.healthy():
            raise EngineUnavailable(self._failure or "the llama.cpp engine is not running")
        items: asyncio.Queue[EngineEvent | BaseException] = asyncio.Queue()
        seq = Seq(prepared, items.put_nowait, asyncio.get_running_loop(),
                   list(prepared.prompt_ids), prepared.max_tokens)
        self._inbox.put(seq)
        self._wake.set()
        if self._failure is not None:  # failed for good between the check and the put
            raise EngineUnavailable(self._failure)
        try:
            yield EngineStart(len(seq.prompt))
            while True:
                item = await items.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, EngineFinish):
                    return
        finally:
            seq.cancelled = True  # the decode thread drops it before its next step
            self._wake.set()

    def forget_cache(self) -> None:
        """Drops every slot's cached prompt (benchmarks of cold starts). Only while idle."""
        for slots in self._slot_sets:
            slots.forget()

    @property
    def reused_prefix_tokens(self) -> int:
        """Prompt tokens found in a slot's cache (or moved from the split tier's), not
        decoded again (since load)."""
        return sum(s.reused_tokens + s.moved_tokens for s in self._slot_sets)

    @property
    def shared_prefix_tokens(self) -> int:
        """Prompt tokens copied from another running sequence (since load)."""
        return sum(s.shared_tokens for s in self._slot_sets)

    async def embed(self, inputs: Sequence[EmbedInput], *, truncate: bool = False,
                    ) -> Embedded:
        if self._embeds is None or not self.healthy():
            raise EngineUnavailable(self._failure or "the llama.cpp engine is not running")
        return await self._embeds.embed(inputs, truncate)

    @property
    def embedding_size(self) -> int | None:
        return None if self._embeds is None else self._embeds.embedder.size

    async def aclose(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        if self._embeds is not None:
            await self._embeds.aclose()
            self._embeds = None
        self._free_context()

    def _free_context(self) -> None:
        self._free_run_state()
        guides = getattr(self, "_guides", None)
        if guides is not None:  # its thread reads the vocabulary: let it end first
            concurrent.futures.wait([guides])
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

    def _free_run_state(self) -> None:
        """Frees the contexts, their batches and the thread pool; the model stays loaded."""
        if self._pool is not None:
            self._pool.close()  # detaches the contexts first
            self._pool = None
        for tier in self._tiers:
            tier.context.close()
        self._tiers = []

    # ---- the decode thread --------------------------------------------------------------
    def _run(self) -> None:
        waiting: deque[Seq] = deque()
        active: list[Seq] = []
        try:
            self._loop(waiting, active)
        except BaseException as exc:  # the context is in an unknown state
            self._recover(exc, [*active, *waiting])

    def _loop(self, waiting: deque[Seq], active: list[Seq]) -> None:
        while not self._stop:
            waiting.extend(drain(self._inbox))
            self._drop_cancelled(waiting, active)
            self._admit(waiting, active)
            if not active:
                self._wake.wait()
                self._wake.clear()
                continue
            self._step(active)

    def _recover(self, exc: BaseException, in_flight: list[Seq]) -> None:
        """Ends the generations in flight with the reason, then carries on with a fresh
        context and decode thread (the model stays loaded); if even that fails, the engine
        is marked failed for good and /health says why."""
        reason = f"the llama.cpp decode loop failed: {type(exc).__name__}: {exc}"
        log.error("%s; recovering", reason, exc_info=exc)
        self.failures += 1
        hand_over([(seq, [EngineError(reason)]) for seq in in_flight])
        for seq in in_flight:
            if seq.sampler is not None:
                lc.llama_sampler_free(seq.sampler)
                seq.sampler = None
        try:
            self._free_run_state()
            self._new_context()
        except Exception as again:
            self._failure = (f"{reason}; a fresh context failed too: "
                             f"{type(again).__name__}: {again}")
            log.error("llama.cpp engine cannot recover: %s", self._failure)
            hand_over([(seq, [EngineUnavailable(self._failure)])
                       for seq in drain(self._inbox)])
            return
        if not self._stop:
            thread = threading.Thread(target=self._run, name="llamacpp-decode", daemon=True)
            thread.start()
            self._thread = thread  # running before anyone sees it (healthy() reads it)
        self.restarts += 1
        log.warning("llama.cpp engine recovered (restart %d)", self.restarts)

    def _drop_cancelled(self, waiting: deque[Seq], active: list[Seq]) -> None:
        for seq in [s for s in waiting if s.cancelled]:
            waiting.remove(seq)
        for seq in [s for s in active if s.cancelled]:
            active.remove(seq)
            self._release(seq)
        for seq in active:  # a donor that went away can no longer share its prefix
            if seq.donor is not None and seq.donor not in active:
                seq.donor, seq.share = None, 0

    def _admit(self, waiting: deque[Seq], active: list[Seq]) -> None:
        """Starts the waiting sequences that have a slot and room in their tier, first come
        first served within a tier: one that waits for room in the shared tier holds back
        the later ones there, not those of the split tier."""
        full: set[int] = set()
        for seq in list(waiting):
            tier = tier_for(self._tiers, seq)
            if id(tier) in full:
                continue
            if not tier.slots.free or not self._assign(seq, tier, active):
                full.add(id(tier))  # no slot, or no room until one ends
                if len(full) == len(self._tiers):
                    return
                continue
            waiting.remove(seq)
            active.append(seq)

    def _assign(self, seq: Seq, tier: Tier, active: list[Seq]) -> bool:
        if not tier.slots.assign(seq, [other for other in active if other.tier is tier]):
            return False
        seq.tier = tier
        move_prefix(seq, self._tiers)
        request = seq.prepared.request
        seq.sampler = make_sampler(request.params, self._vocab.n_tokens,
                                   seq.prompt, self.info.context_tokens)
        grammar = grammar_for(request, inside=opens_thinking(seq.prepared))
        if grammar is not None:  # checked in prepare(): compiled and cached
            seq.guide = self._guides.result().start(*grammar)
        return True

    def _release(self, seq: Seq) -> None:
        seq.tier.slots.release(seq)
        seq.guide = None
        if seq.sampler is not None:
            lc.llama_sampler_free(seq.sampler)
            seq.sampler = None

    def _step(self, active: list[Seq]) -> None:
        rows = self._plan(active)
        # a llama_decode a tier; serial: one token each, so that every matmul sees one row
        groups = [[row for row in rows if row[0].tier is tier] for tier in self._tiers]
        if self.determinism == "serial":
            groups = [[row] for group in groups for row in group]
        outbox: list[tuple[Seq, list[EngineEvent | BaseException]]] = []
        for group in groups:
            group = [row for row in group if row[0] in active]  # not failed or finished
            if group:
                outbox.extend(self._decode(group, active))
        # a long prompt's progress, before its first token
        hand_over([*progress(rows, PROMPT_CHUNK), *outbox])

    def _plan(self, active: list[Seq]) -> list[_Row]:
        """This step's rows: the sampled token of every decoding sequence, then chunks of
        waiting prompts, first come first served, sorted by slot (llama.cpp puts rows in
        one ubatch only for increasing, consecutive sequence ids: each run is one graph)."""
        rows: list[_Row] = []
        for seq in active:
            if seq.donor is not None and seq.donor.n_past >= seq.share:
                seq.tier.slots.take_from_donor(seq)
            if not seq.todo:
                rows.append((seq, seq.last, seq.n_past, True))
        budget = self._batch_cap - len(rows)
        if rows:
            budget = min(budget, PROMPT_CHUNK)
        for seq in active:
            if seq.todo and seq.donor is None and budget > 0:
                take = min(budget, PROMPT_CHUNK)  # a long prompt in steps: progress between
                chunk, seq.todo = seq.todo[:take], seq.todo[take:]
                last = len(chunk) - 1 if not seq.todo else -1
                rows.extend((seq, token, seq.n_past + i, i == last)
                            for i, token in enumerate(chunk))
                budget -= len(chunk)
        rows.sort(key=lambda row: row[0].slot)  # stable: a prompt's tokens stay in order
        return rows

    def _decode(self, rows: list[_Row], active: list[Seq]
                ) -> list[tuple[Seq, list[EngineEvent | BaseException]]]:
        """One llama_decode of rows (all of one tier), then each sequence's sampled token
        (or the error)."""
        tier = rows[0][0].tier
        batch = tier.context.batch
        for i, (seq, token, pos, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq.slot, logits
            if logits:
                seq.batch_index = i
        batch.n_tokens = len(rows)
        rc = lc.llama_decode(tier.context.ctx, batch)
        outbox: list[tuple[Seq, list[EngineEvent | BaseException]]] = []
        if rc != 0:
            error = EngineError(f"llama_decode failed with code {rc}")
            for seq in dict.fromkeys(row[0] for row in rows):
                tier.slots.drop(seq.slot)
                active.remove(seq)
                self._release(seq)
                outbox.append((seq, [error]))
            return outbox
        cached = tier.slots.cached
        for seq, token, _, _ in rows:
            cached[seq.slot].append(token)
            seq.n_past += 1
        for seq, _, _, logits in rows:
            if logits:
                outbox.append((seq, self._sample(seq, active)))
        return outbox

    def _sample(self, seq: Seq, active: list[Seq]) -> list[EngineEvent | BaseException]:
        guide = seq.guide
        top = seq.prepared.request.params.logprobs
        logits = None
        ctx = seq.tier.context.ctx
        if seq.sampler is None or guide is not None or top is not None:
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, seq.batch_index),
                                           shape=(self._vocab.n_tokens,))
            if guide is not None:  # in place: the sampler chain reads the same row
                guide.constrain(logits)
        if seq.sampler is None:
            token = int(np.argmax(logits))  # type: ignore[arg-type]  # fetched just above
        else:  # the chain works on a copy of the row: `logits` stays as the model wrote it
            token = lc.llama_sampler_sample(seq.sampler, ctx, seq.batch_index)
        seq.generated += 1
        items: list[EngineEvent | BaseException] = []
        finish: FinishReason | None = None
        if self._vocab.is_eog(token):
            finish = FinishReason.STOP
        elif top is not None and logits is not None:
            seq.logprobs.append(token_logprob(logits, token, top, self._vocab.piece))
            text = seq.decoder.feed(self._vocab.piece(token))
            if text:  # a token that ends inside a character waits for the one that ends it
                items.append(EngineText(text, logprobs=tuple(seq.logprobs)))
                seq.logprobs.clear()
            else:
                items.append(EngineText(text))
        else:
            items.append(EngineText(seq.decoder.feed(self._vocab.piece(token))))
        if finish is None:
            if guide is not None and not guide.accept(token):  # this generation alone
                active.remove(seq)
                self._release(seq)
                return [guide.failure()]  # the library's limit: a 400 naming the field
            if guide is not None and guide.done:  # nothing but the end may follow
                finish = FinishReason.STOP
            elif seq.generated >= seq.max_tokens:
                finish = FinishReason.LENGTH
        if finish is not None:
            tail = seq.decoder.flush()
            if tail or seq.logprobs:
                items.append(EngineText(tail, tokens=0, logprobs=tuple(seq.logprobs)))
                seq.logprobs.clear()
            items.append(EngineFinish(finish, Usage(len(seq.prompt), seq.generated,
                                                    seq.cached)))
            active.remove(seq)
            self._release(seq)
        seq.last = token
        return items


    # ---- llama.cpp alone, for `tokenpipe bench --decode-steps` ----------------------------
    @classmethod
    def time_decode_steps(cls, options: EngineOptions, sizes: Sequence[int], *,
                          rounds: int = 5, steps: int = 16, prompt_tokens: int = 64
                          ) -> dict[int, list[float]]:
        """No server and no sampling: seconds per llama_decode of one token for each of k
        sequences, for every k in sizes (A B A B over rounds, `steps` each). What k streams
        can gain over one on this machine and model is bounded by k x t(1) / t(k).

        Loads an engine of its own (as `tokenpipe serve` would with these options) and
        frees it at the end; run it while nothing else uses the cores."""
        engine = cls(replace(options, parallel=max(sizes)))
        return decode_steps.time_decode_steps(engine, sizes, rounds=rounds, steps=steps,
                                              prompt_tokens=prompt_tokens)
