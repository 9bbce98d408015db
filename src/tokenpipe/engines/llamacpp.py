"""llama.cpp through llama-cpp-python's low-level API, with continuous batching.

One decode thread owns the llama context. Sequences join between steps; each step is one
llama_decode holding one token per decoding sequence plus a chunk of at most one waiting
prompt, so a new prompt never stalls the others for long. Each sequence keeps its KV
cells in its own slot after it ends; the next request whose prompt shares a prefix with a
slot's cache (the next turn of a chat, the same system prompt) skips that prefix.
Tokens reach asyncio through call_soon_threadsafe, once per step for all sequences.
A token's arithmetic does not depend on what shares its step (--determinism, default exact:
_llamacpp_exact picks the kernels), so the caches and the batching never change an answer.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import queue
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import EngineError, EngineUnavailable, MissingDependency
from ..text import Utf8Decoder
from ..types import (
    EngineEvent,
    EngineFinish,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    SamplingParams,
    Usage,
)
from . import _ggml_threadpool, _llamacpp_exact
from .base import (
    Engine,
    EngineInfo,
    EngineOptions,
    PreparedRequest,
    bundled_model_path,
    hand_over,
)

try:
    import llama_cpp as lc
    import numpy as np
    from llama_cpp import _logger as llama_logger
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependency(
        f"the llamacpp engine needs llama-cpp-python ({exc.name} is missing): "
        "pip install 'tokenpipe[llamacpp]'"
    ) from None

log = logging.getLogger("tokenpipe.llamacpp")
default_model_path = bundled_model_path  # the name bench and tests know it by

PROMPT_CHUNK = 512  # prompt tokens per step while other sequences are decoding
SHARE_MIN = 32  # copy a prompt prefix from another sequence when it saves this many tokens


@dataclass(eq=False)
class _Seq:
    """One generation as the decode thread sees it."""

    prepared: PreparedRequest
    deliver: Any  # (items) -> None, called on the event loop
    loop: asyncio.AbstractEventLoop
    prompt: list[int]
    max_tokens: int
    cancelled: bool = False
    slot: int = -1
    n_past: int = 0  # tokens of this sequence already in the KV cache
    todo: list[int] = field(default_factory=list)  # prompt tokens still to decode
    last: int = -1  # the sampled token that the next step decodes
    generated: int = 0
    sampler: Any = None
    decoder: Utf8Decoder = field(default_factory=Utf8Decoder)
    batch_index: int = -1  # where this step's logits for it are
    donor: _Seq | None = None  # a running sequence whose prompt prefix this one will copy
    share: int = 0  # how many prompt tokens it copies from the donor
    cached: int = 0  # prompt tokens taken from a cache (its slot's or a donor's)


_Row = tuple[_Seq, int, int, bool]  # (sequence, token, position, wants logits)


class LlamaCppEngine(Engine):
    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.model_path = Path(options.model) if options.model else None
        model_id = options.model_id or (
            self.model_path.stem if self.model_path else "SmolLM2-135M-Instruct"
        )
        self.parallel = max(1, options.parallel)
        if options.determinism not in _llamacpp_exact.MODES:
            raise EngineError(f"determinism must be one of {', '.join(_llamacpp_exact.MODES)}, "
                              f"not {options.determinism!r}")
        self.determinism = options.determinism
        self.rows_exact: bool | None = None  # the load-time check's verdict (None: not run)
        self.info = EngineInfo("llamacpp", model_id, options.context_size // self.parallel,
                               self.parallel)
        self._inbox: queue.SimpleQueue[_Seq] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self.failures = 0  # decode-loop faults that ended the generations in flight
        self.restarts = 0  # fresh contexts after such a fault
        self._threadpool: Any = None
        self._pieces: dict[int, bytes] = {}
        self.reused_prefix_tokens = 0  # prompt tokens found in a slot's cache, not decoded
        self.shared_prefix_tokens = 0  # prompt tokens copied from another sequence

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
        _llamacpp_exact.model_params(self.determinism, mparams)  # determinism: the weights
        self._model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not self._model:
            raise EngineError(f"llama.cpp could not load {path}")
        self._vocab = lc.llama_model_get_vocab(self._model)
        self._n_vocab = lc.llama_vocab_n_tokens(self._vocab)
        self._formatter = self._chat_formatter()
        self.model_path = path
        self._new_context()
        log.info("loaded %s: context %d per sequence x %d, %d threads", path.name,
                 self.info.context_tokens, self.parallel, self._threads)

    def _new_context(self) -> None:
        """A fresh context, batch and thread pool for the loaded model (at load, and when the
        engine recovers from a fault: the old context's state is unknown then)."""
        threads = self._threads = self.options.threads or os.cpu_count() or 1
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = self.options.context_size
        cparams.n_batch = max(2048, PROMPT_CHUNK + self.parallel)
        cparams.n_ubatch = 512
        cparams.n_seq_max = self.parallel
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = False
        cparams.no_perf = True
        _llamacpp_exact.context_params(self.determinism, cparams)  # determinism: the KV cache
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise EngineError("llama.cpp could not create a context")
        self._mem = lc.llama_get_memory(self._ctx)
        self._threadpool = _ggml_threadpool.attach(self._ctx, threads)
        self.info = EngineInfo("llamacpp", self.info.model_id,
                               lc.llama_n_ctx_seq(self._ctx), self.parallel)
        self._batch = lc.llama_batch_init(cparams.n_batch, 0, 1)
        self._batch_cap = cparams.n_batch
        self._cached: list[list[int]] = [[] for _ in range(self.parallel)]
        self._free: list[int] = list(range(self.parallel))
        self._check_determinism()  # each fresh context: its kernels are the verdict

    def _check_determinism(self) -> None:
        if self.determinism != "exact":  # serial: one row per decode, exact by construction;
            return  # fast: llama.cpp's kernels, whose shape-dependent paths no short check sees
        self.rows_exact = _llamacpp_exact.rows_are_exact(self._ctx, self._mem, self._batch,
                                                         self._n_vocab, self.parallel)
        if not self.rows_exact:
            log.warning("this model's weight types make a token's arithmetic depend on its "
                        "batch (docs/determinism.md): greedy answers may vary with caching "
                        "and load; --determinism serial makes them exact, slowly")

    def _meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            lc.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def _chat_formatter(self) -> Jinja2ChatFormatter | None:
        template = self._meta("tokenizer.chat_template")
        if not template:
            return None
        bos = self._piece(lc.llama_vocab_bos(self._vocab), special=True).decode(errors="replace")
        eos = self._piece(lc.llama_vocab_eos(self._vocab), special=True).decode(errors="replace")
        return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

    # ---- text ---------------------------------------------------------------------------
    def render(self, request: GenerationRequest) -> str:
        if request.prompt is not None:
            return request.prompt
        assert request.messages is not None
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        if self._formatter is None:  # no template in the GGUF: a plain transcript
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return self._formatter(messages=messages).prompt  # type: ignore[arg-type]

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        data = text.encode()
        capacity = len(data) + 8
        out = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(self._vocab, data, len(data), out, capacity, add_special, True)
        if n < 0:
            capacity = -n
            out = (lc.llama_token * capacity)()
            n = lc.llama_tokenize(self._vocab, data, len(data), out, capacity, add_special, True)
        return list(out[:n])

    def encode(self, request: GenerationRequest, text: str) -> list[int]:
        # a raw completion gets the model's BOS, as llama.cpp adds it
        return self.tokenize(text, add_special=request.prompt is not None)

    def _piece(self, token: int, *, special: bool = False) -> bytes:
        if not special and token in self._pieces:
            return self._pieces[token]
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
        piece = buf.raw[:n]
        if not special:
            self._pieces[token] = piece
        return piece

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
        seq = _Seq(prepared, items.put_nowait, asyncio.get_running_loop(),
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
        if len(self._free) != self.parallel:
            raise RuntimeError("forget_cache() while sequences are running")
        for slot in range(self.parallel):
            lc.llama_memory_seq_rm(self._mem, slot, -1, -1)
            self._cached[slot].clear()

    async def aclose(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        self._free_context()

    def _free_context(self) -> None:
        self._free_run_state()
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

    def _free_run_state(self) -> None:
        """Frees the context, its batch and thread pool; the model stays loaded."""
        if getattr(self, "_ctx", None):
            if self._threadpool is not None:
                self._threadpool.close()
                self._threadpool = None
            lc.llama_batch_free(self._batch)
            lc.llama_free(self._ctx)
            self._ctx = None

    # ---- the decode thread --------------------------------------------------------------
    def _run(self) -> None:
        waiting: deque[_Seq] = deque()
        active: list[_Seq] = []
        try:
            self._loop(waiting, active)
        except BaseException as exc:  # the context is in an unknown state
            self._recover(exc, [*active, *waiting])

    def _loop(self, waiting: deque[_Seq], active: list[_Seq]) -> None:
        while not self._stop:
            while True:
                try:
                    waiting.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            self._drop_cancelled(waiting, active)
            while waiting and self._free:
                seq = waiting[0]
                self._assign(seq, active)
                waiting.popleft()
                active.append(seq)
            if not active:
                self._wake.wait()
                self._wake.clear()
                continue
            self._step(active)

    def _recover(self, exc: BaseException, in_flight: list[_Seq]) -> None:
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
                       for seq in _drain(self._inbox)])
            return
        self.restarts += 1
        if not self._stop:
            self._thread = threading.Thread(target=self._run, name="llamacpp-decode",
                                            daemon=True)
            self._thread.start()
        log.warning("llama.cpp engine recovered (restart %d)", self.restarts)

    def _drop_cancelled(self, waiting: deque[_Seq], active: list[_Seq]) -> None:
        for seq in [s for s in waiting if s.cancelled]:
            waiting.remove(seq)
        for seq in [s for s in active if s.cancelled]:
            active.remove(seq)
            self._release(seq)
        for seq in active:  # a donor that went away can no longer share its prefix
            if seq.donor is not None and seq.donor not in active:
                seq.donor, seq.share = None, 0

    def _assign(self, seq: _Seq, active: list[_Seq]) -> None:
        """Gives seq the free slot whose cache shares the longest prefix with its prompt.

        If a running sequence holds (or is about to hold) a clearly longer prefix, seq waits
        for it and copies those cells instead of computing them again: one shared system
        prompt is decoded once, not once per request."""
        best, best_common = self._free[0], -1
        for slot in self._free:
            common = _common_prefix(self._cached[slot], seq.prompt)
            if common > best_common:
                best, best_common = slot, common
        self._free.remove(best)
        limit = len(seq.prompt) - 1  # the last prompt token must be decoded for its logits
        common = min(best_common, limit)
        lc.llama_memory_seq_rm(self._mem, best, common, -1)
        del self._cached[best][common:]
        self.reused_prefix_tokens += common
        seq.slot, seq.n_past, seq.todo = best, common, seq.prompt[common:]
        seq.cached = common
        seq.sampler = _make_sampler(seq.prepared.request.params, self._n_vocab, seq.prompt,
                                   self.info.context_tokens)
        donor, share = None, common + SHARE_MIN
        for other in active:
            shared = min(_common_prefix(other.prompt, seq.prompt), limit)
            if shared >= share:
                donor, share = other, shared
        if donor is not None:
            seq.donor, seq.share = donor, share

    def _take_from_donor(self, seq: _Seq) -> None:
        """Copies the donor's cells (a whole-stream copy: the only kind llama.cpp does
        between streams), then cuts them to the shared prefix."""
        donor = seq.donor
        assert donor is not None
        lc.llama_memory_seq_rm(self._mem, seq.slot, -1, -1)
        lc.llama_memory_seq_cp(self._mem, donor.slot, seq.slot, -1, -1)
        lc.llama_memory_seq_rm(self._mem, seq.slot, seq.share, -1)
        self._cached[seq.slot] = self._cached[donor.slot][: seq.share]
        self.shared_prefix_tokens += seq.share
        seq.n_past, seq.todo = seq.share, seq.prompt[seq.share :]
        seq.cached = seq.share
        seq.donor, seq.share = None, 0

    def _release(self, seq: _Seq) -> None:
        if seq.slot >= 0:
            self._free.append(seq.slot)
            seq.slot = -1
        if seq.sampler is not None:
            lc.llama_sampler_free(seq.sampler)
            seq.sampler = None

    def _step(self, active: list[_Seq]) -> None:
        rows = self._plan(active)
        # serial: one token per llama_decode, so that every matmul sees a single row
        groups = [[row] for row in rows] if self.determinism == "serial" else [rows]
        outbox: list[tuple[_Seq, list[EngineEvent | BaseException]]] = []
        for group in groups:
            group = [row for row in group if row[0] in active]  # not failed or finished
            if group:
                outbox.extend(self._decode(group, active))
        hand_over(outbox)

    def _plan(self, active: list[_Seq]) -> list[_Row]:
        """This step's rows: the sampled token of every decoding sequence, then chunks of
        waiting prompts, first come first served, sorted by slot (llama.cpp puts rows in
        one ubatch only for increasing, consecutive sequence ids: each run is one graph)."""
        rows: list[_Row] = []
        for seq in active:
            if seq.donor is not None and seq.donor.n_past >= seq.share:
                self._take_from_donor(seq)
            if not seq.todo:
                rows.append((seq, seq.last, seq.n_past, True))
        budget = self._batch_cap - len(rows)
        if rows:
            budget = min(budget, PROMPT_CHUNK)
        for seq in active:
            if seq.todo and seq.donor is None and budget > 0:
                chunk, seq.todo = seq.todo[:budget], seq.todo[budget:]
                last = len(chunk) - 1 if not seq.todo else -1
                rows.extend((seq, token, seq.n_past + i, i == last)
                            for i, token in enumerate(chunk))
                budget -= len(chunk)
        rows.sort(key=lambda row: row[0].slot)  # stable: a prompt's tokens stay in order
        return rows

    def _decode(self, rows: list[_Row], active: list[_Seq]
                ) -> list[tuple[_Seq, list[EngineEvent | BaseException]]]:
        """One llama_decode of rows, then each sequence's sampled token (or the error)."""
        batch = self._batch
        for i, (seq, token, pos, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq.slot, logits
            if logits:
                seq.batch_index = i
        batch.n_tokens = len(rows)
        rc = lc.llama_decode(self._ctx, batch)
        outbox: list[tuple[_Seq, list[EngineEvent | BaseException]]] = []
        if rc != 0:
            error = EngineError(f"llama_decode failed with code {rc}")
            for seq in dict.fromkeys(row[0] for row in rows):
                lc.llama_memory_seq_rm(self._mem, seq.slot, -1, -1)
                self._cached[seq.slot].clear()
                active.remove(seq)
                self._release(seq)
                outbox.append((seq, [error]))
            return outbox
        for seq, token, _, _ in rows:
            self._cached[seq.slot].append(token)
            seq.n_past += 1
        for seq, _, _, logits in rows:
            if logits:
                outbox.append((seq, self._sample(seq, active)))
        return outbox

    def _sample(self, seq: _Seq, active: list[_Seq]) -> list[EngineEvent | BaseException]:
        if seq.sampler is None:
            logits = lc.llama_get_logits_ith(self._ctx, seq.batch_index)
            token = int(np.argmax(np.ctypeslib.as_array(logits, shape=(self._n_vocab,))))
        else:
            token = lc.llama_sampler_sample(seq.sampler, self._ctx, seq.batch_index)
        seq.generated += 1
        items: list[EngineEvent | BaseException] = []
        finish: FinishReason | None = None
        if lc.llama_vocab_is_eog(self._vocab, token):
            finish = FinishReason.STOP
        else:
            items.append(EngineText(seq.decoder.feed(self._piece(token))))
            if seq.generated >= seq.max_tokens:
                finish = FinishReason.LENGTH
        if finish is not None:
            tail = seq.decoder.flush()
            if tail:
                items.append(EngineText(tail, tokens=0))
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
        engine._load()
        try:
            ctx, batch, vocab = engine._ctx, engine._batch, engine._n_vocab
            need = prompt_tokens + steps + 1
            if need > engine.info.context_tokens:
                raise EngineError(f"{need} tokens a sequence do not fit the context "
                                  f"({engine.info.context_tokens}): raise context_size")

            def decode(items: Sequence[tuple[int, int, int, bool]]) -> None:
                for i, (token, pos, seq, logits) in enumerate(items):
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
                    batch.seq_id[i][0], batch.logits[i] = seq, logits
                batch.n_tokens = len(items)
                rc = lc.llama_decode(ctx, batch)
                if rc != 0:
                    raise EngineError(f"llama_decode failed with code {rc}")

            # Each sequence holds a prompt of the same length; after every run of steps they
            # are cut back to it, so every k decodes at the same positions.
            pos = [0] * engine.parallel
            for seq in range(engine.parallel):
                decode([((7 + 13 * i + seq) % vocab, i, seq, i == prompt_tokens - 1)
                        for i in range(prompt_tokens)])
                pos[seq] = prompt_tokens
            times: dict[int, list[float]] = {k: [] for k in sizes}
            for _ in range(rounds):
                for k in sizes:
                    for _ in range(steps):
                        items = [((11 * pos[s]) % vocab, pos[s], s, True) for s in range(k)]
                        start = time.perf_counter()
                        decode(items)
                        lc.llama_get_logits_ith(ctx, k - 1)  # the step's results are there
                        times[k].append(time.perf_counter() - start)
                        for s in range(k):
                            pos[s] += 1
                    for s in range(k):  # back to the prompt: every k sees the same positions
                        lc.llama_memory_seq_rm(engine._mem, s, prompt_tokens, -1)
                        pos[s] = prompt_tokens
            return times
        finally:
            engine._free_context()


def _drain(inbox: queue.SimpleQueue[_Seq]) -> list[_Seq]:
    out: list[_Seq] = []
    while True:
        try:
            out.append(inbox.get_nowait())
        except queue.Empty:
            return out


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _make_sampler(params: SamplingParams, n_vocab: int, prompt: Sequence[int],
                  window: int) -> Any:
    """None for plain greedy (argmax is cheaper than a sampler chain), else a chain.

    The penalties mean what they mean on the transformers engine and in vLLM: the
    repetition penalty covers the prompt and the answer, presence and frequency (OpenAI's)
    count only the answer's tokens. `window` (the sequence's context) bounds both."""
    repeat = params.repetition_penalty != 1.0
    counted = params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
    if params.greedy and not (repeat or counted):
        return None
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if repeat:
        sampler = lc.llama_sampler_init_penalties(n_vocab, window, params.repetition_penalty,
                                                  0.0, 0.0)
        for token in prompt[-window:]:  # the chain accepts only what it samples
            lc.llama_sampler_accept(sampler, token)
        lc.llama_sampler_chain_add(chain, sampler)
    if counted:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_penalties(
            n_vocab, window, 1.0, params.frequency_penalty, params.presence_penalty))
    if params.greedy:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        return chain
    if params.top_k > 0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_min_p(params.min_p, 1))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(params.temperature))
    seed = params.seed if params.seed is not None else random.getrandbits(32)
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain

