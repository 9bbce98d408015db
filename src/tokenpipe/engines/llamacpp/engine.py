"""llama.cpp through llama-cpp-python's low-level API, with continuous batching.

This module is the engine's face: building it from options, loading the model and its
contexts, the prompt's text and tokens, and the event-loop side of a stream. One decode
thread owns the llama contexts (decode_thread.py): sequences join between steps; each step
is one llama_decode holding one token per decoding sequence plus a chunk of at most one
waiting prompt, so a new prompt never stalls the others for long. The prompt cache's
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
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...constrain import Guides, OnFirstUse, check_request, llamacpp_view
from ...errors import EngineError, EngineUnavailable, MissingDependency
from ...text import Utf8Decoder
from ...types import EngineEvent, EngineFinish, EngineStart, GenerationRequest
from ..base import (
    DEFAULT_CONTEXT,
    Embedded,
    EmbedInput,
    Engine,
    EngineInfo,
    EngineOptions,
    PreparedRequest,
    bundled_model_path,
    given_ids,
)
from ..prefill import prefill_of

try:
    import llama_cpp as lc
    from llama_cpp import _logger as llama_logger

    from . import decode_steps, exact, threadpool
    from .context import give_back_freed_memory
    from .decode_thread import PROMPT_CHUNK, DecodeThread
    from .draft import DraftModel, token_texts
    from .embed import EMBED_WINDOW, Embedder, EmbedWorker
    from .kind import KIND
    from .pace import PromptPace
    from .slots import Seq, Slots
    from .speculate import VerifyCost
    from .tiers import Tier, default_cells, layout, per_sequence
    from .vocab import Vocab
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependency(
        f"the llamacpp engine needs llama-cpp-python ({exc.name} is missing): "
        "pip install 'tokenpipe[llamacpp]'"
    ) from None

log = logging.getLogger("tokenpipe.llamacpp")


class LlamaCppEngine(DecodeThread, Engine):
    kind = KIND
    def __init__(self, options: EngineOptions) -> None:
        self.options = options
        self.model_path = Path(options.model) if options.model else None
        model_id = options.model_id or (
            self.model_path.stem if self.model_path else "SmolLM2-135M-Instruct"
        )
        self.parallel = max(1, options.parallel)
        own = KIND.read(options.values)
        if own["determinism"] not in exact.MODES:
            raise EngineError(f"determinism must be one of {', '.join(exact.MODES)}, "
                              f"not {own['determinism']!r}")
        self.determinism: str = own["determinism"]
        self.kv_cache: str = own["kv_cache"]
        self.speculate: str = own["speculate"]
        self.speculate_policy: str = own["speculate_policy"]
        self.speculate_draft = int(own["speculate_draft"])
        self.draft_model: str | None = own["draft_model"] or None
        if self.draft_model and self.speculate == "off":  # the draft model says it all
            self.speculate = "draft"
        if self.speculate == "draft" and not self.draft_model:
            raise EngineError("--speculate draft needs --draft-model NAME (a GGUF of the "
                              "model's vocabulary)")
        if self.draft_model and self.speculate != "draft":
            raise EngineError(f"--draft-model is for --speculate draft, not "
                              f"--speculate {self.speculate}")
        if self.speculate_draft < 1:
            raise EngineError("speculate_draft must be at least 1")
        self._draft: DraftModel | None = None  # loaded with the model
        if self.speculate != "off" and self.determinism == "serial":
            raise EngineError("--speculate verifies drafts in one decode: it needs "
                              "--determinism exact (or fast), not serial")
        if self.speculate != "off" and self.determinism == "fast":
            log.warning("--speculate under --determinism fast: llama.cpp's kernels for "
                        "several rows differ from one row's, so answers may change")
        self._verify_cost = VerifyCost()
        if float(own["prompt_step_ms"]) < 0:
            raise EngineError("prompt_step_ms must be 0 (no limit) or more")
        self._pace = PromptPace(float(own["prompt_step_ms"]) / 1000)
        # seconds the shared tier's cells stay allocated while unused (< 0: always)
        self.shared_tier_keep_alive = float(own["shared_tier_keep_alive"])
        self.rows_exact: bool | None = None  # the load-time check's verdict (None: not run)
        cells = options.context_size or default_cells(self.kv_cache, self.parallel,
                                                      DEFAULT_CONTEXT)  # until load
        self._layout = layout(self.kv_cache, cells, self.parallel)
        self.info = EngineInfo("llamacpp", model_id,
                               per_sequence(self.kv_cache, cells, self.parallel), self.parallel,
                               embeds=True)
        self._inbox: queue.SimpleQueue[Seq] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._turn = threading.Lock()
        self._parked = False
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
        """Loads on the decode thread, which then decodes: every llama_decode of the engine
        (the load-time check's too) runs on that one thread (compute.py says why)."""
        loaded: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._load_and_run, args=(loaded,),
                                        name="llamacpp-decode", daemon=True)
        self._thread.start()
        await asyncio.wrap_future(loaded)

    def _load_and_run(self, loaded: concurrent.futures.Future[None]) -> None:
        if not loaded.set_running_or_notify_cancel():
            return
        try:
            self._load()
        except BaseException as exc:
            loaded.set_exception(exc)
            return
        loaded.set_result(None)
        self._run()

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
        if self.draft_model:
            self._draft = DraftModel.load(self._draft_path(), token_texts(self._vocab.handle),
                                          path.name)
        if self.options.context_size is None:  # the model's own trained context
            self._layout = layout(self.kv_cache, default_cells(
                self.kv_cache, self.parallel, lc.llama_model_n_ctx_train(self._model)),
                self.parallel)
        self.model_path = path
        # the grammar library's view of the vocabulary: built by the first request with an
        # output format, once per model file (it holds the GIL ~0.1 s: constrain/vocabularies.py)
        n_tokens = self._vocab.n_tokens
        self._guides = OnFirstUse(lambda: Guides.of(llamacpp_view(path), n_tokens))
        self._new_context()
        self._embeds = EmbedWorker(Embedder(
            self._model, self._vocab.n_tokens, self._threads,
            min(EMBED_WINDOW, lc.llama_model_n_ctx_train(self._model))),
            lambda text: self._vocab.tokenize(text, add_special=True))  # as llama-server
        log.info("loaded %s: context %d (%s), %d sequences, %d threads%s", path.name,
                 sum(cells for _, cells in self._layout),
                 " + ".join(t.label for t in self._tiers),
                 self.parallel, self._threads,
                 f", draft model {self._draft.path.name}" if self._draft else "")

    def _draft_path(self) -> Path:
        """--draft-model's file: a path as given, else a name resolved as --model's is
        (the server resolves it before loading: model_plans.py; this is for an engine
        built from options directly)."""
        assert self.draft_model
        given = Path(self.draft_model).expanduser()
        if given.is_file():
            return given
        from ...models import Places, resolve

        try:
            found = resolve(self.draft_model, Places(), download=False)
        except ValueError as exc:  # ModelNotFound: the candidates
            raise EngineError(f"draft model: {exc}") from None
        return found.path if found is not None else given

    def _new_context(self) -> None:
        """Fresh contexts (a tier each), batches and thread pool for the loaded model (at
        load, and when the engine recovers from a fault: the old state is unknown then).
        Every tier is opened and checked (exact mode); a lazy one (the tiered layout's
        shared tier) is closed again until a conversation needs it."""
        self._threads = self.options.threads or os.cpu_count() or 1
        self._pool = threadpool.create(self._threads)
        lazy = len(self._layout) > 1 and self.shared_tier_keep_alive >= 0
        self._tiers = [Tier(slots, shared, cells, lazy=lazy and shared)
                       for (shared, cells), slots in zip(self._layout, self._slot_sets,
                                                         strict=True)]
        verdicts = []
        for tier in self._tiers:
            self._open_tier(tier)
            verdicts.append(exact.check(self.determinism, tier.context, self._vocab.n_tokens,
                                        self.parallel))
        self._batch_cap = min(t.context.batch_cap for t in self._tiers)
        self.info = EngineInfo("llamacpp", self.info.model_id,
                               max(t.context_tokens for t in self._tiers), self.parallel,
                               embeds=True, thinks=self._vocab.thinks)
        self.rows_exact = None if verdicts[0] is None else all(verdicts)
        for tier in self._tiers:
            if tier.lazy:
                self._close_tier(tier)
        if self._draft is not None:  # one sequence's cells, as long as the longest here
            cells = min(self.info.context_tokens + self.speculate_draft,
                        max(self._draft.n_ctx_train, 512))
            draft = self._draft.open(cells, self._threads)
            if self._pool is not None:
                self._pool.attach(draft.ctx)

    def _open_tier(self, tier: Tier) -> None:
        context = tier.open(self._model, self.determinism, threads=self._threads,
                            batch_min=PROMPT_CHUNK + self.parallel)
        if self._pool is not None:
            self._pool.attach(context.ctx)

    def _close_tier(self, tier: Tier) -> None:
        if tier.is_open and self._pool is not None:
            self._pool.detach(tier.context.ctx)
        tier.close()
        give_back_freed_memory()

    def check_output(self, request: GenerationRequest) -> Mapping[str, Any]:
        return check_request(self._guides.result, request, prefill_of(request) or "")

    # ---- text ---------------------------------------------------------------------------
    def render(self, request: GenerationRequest) -> str:
        return self._vocab.render(request)

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        return self._vocab.tokenize(text, add_special=add_special)

    def encode(self, request: GenerationRequest, text: str) -> list[int]:
        if request.prompt_ids is not None:  # as given: no BOS added
            return given_ids(request.prompt_ids, self._vocab.n_tokens)
        if request.prompt is not None:  # the model's BOS, as llama.cpp adds it
            return self._vocab.tokenize(text, add_special=True)
        return self._vocab.encode_chat(request, text)  # the client's text as text

    # ---- streaming (event loop side) ----------------------------------------------------
    def healthy(self) -> bool:
        return self._failure is None and self._thread is not None and (
            self._parked or self._thread.is_alive())

    @property
    def failure(self) -> str | None:
        return self._failure

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        if not self.healthy():
            raise EngineUnavailable(self._failure or "the llama.cpp engine is not running")
        items: asyncio.Queue[EngineEvent | BaseException] = asyncio.Queue()
        seq = Seq(prepared, items.put_nowait, asyncio.get_running_loop(),
                   list(prepared.prompt_ids), prepared.max_tokens)
        if prepared.request.prompt_ids is not None:  # may go on inside a character
            tail = prepared.request.prompt_ids[-3:]
            seq.decoder = Utf8Decoder.after(b"".join(map(self._vocab.piece, tail)))
        self._submit(seq)
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
        if self._draft is not None:
            self._draft.free()
            self._draft = None
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

    def _free_run_state(self) -> None:
        """Frees the contexts, their batches and the thread pool; the model stays loaded."""
        if self._pool is not None:
            self._pool.close()  # detaches the contexts first
            self._pool = None
        for tier in self._tiers:
            tier.close()
        self._tiers = []
        if self._draft is not None:
            self._draft.close()

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

    @classmethod
    def time_verify_steps(cls, options: EngineOptions, widths: Sequence[int], *,
                          rounds: int = 5, steps: int = 8, prompt_tokens: int = 256
                          ) -> dict[int, list[float]]:
        """Seconds per llama_decode of w rows of one sequence (its next token and w - 1
        drafted ones, each with logits, as --speculate verifies them) after a prompt of
        `prompt_tokens`, for every w in widths (A B A B over rounds); the rows are removed
        after each. Loads an engine of its own and frees it at the end."""
        engine = cls(replace(options, parallel=1))
        return decode_steps.time_verify_steps(engine, widths, rounds=rounds, steps=steps,
                                              prompt_tokens=prompt_tokens)
