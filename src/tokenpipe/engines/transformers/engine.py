"""Hugging Face transformers (PyTorch), the original article's stack, with its flaws fixed.

One decode thread owns the model; the event loop never runs a forward pass. The thread
keeps up to `parallel` sequences in one batch (batch.KVBatch) and runs one forward per
step with one token per sequence. Requests waiting to join are prefilled together in one
forward (left-padded, like the batch), a group of similar lengths bounded by prefill_tokens
padded tokens (a lone request, or one longer than the budget, goes alone), and then join;
between two prefill groups the running sequences take a step. Closing a stream marks its
sequence cancelled, and the thread drops it before the next step (a request cancelled
during its prefill does not join), so the compute stops within a token. Sampling is our
own (sampling.py), which gives each request its own seeded generator and its own
settings inside one batch.
Tokens reach asyncio through one call_soon_threadsafe per event loop per step.

Why not transformers' own continuous batching (ContinuousBatchingManager, generate_batch):
docs/transformers-engine.md has the figures (transformers 5.24, the 2-core CPU, the bundled
model). This loop was 1.11x faster at 1 stream and 1.18x at 8 (A B A B on one model object),
and the manager has no per-request seed, one do_sample flag for the whole batch, no min_p or
penalties per request, no final event for a cancelled request, and a bad value in one
request (temperature 0 when sampling) stops its loop for all of them. Its one edge, a
lower TTFT p99 at 8 simultaneous streams from prefilling them in one forward, this loop now
has too (the figures are in the same page).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...constrain import Guide, Guides, build_in_background, grammar_for
from ...constrain.tools import chat_messages, template_takes_tools
from ...errors import EngineError, EngineUnavailable, MissingDependency
from ...logprobs import token_logprob
from ...text import IdDetokenizer
from ...types import (
    EngineEvent,
    EngineFinish,
    EngineProgress,
    EngineStart,
    EngineText,
    FinishReason,
    GenerationRequest,
    TokenLogprob,
    Usage,
)
from ..base import (
    PROGRESS_TOKENS,
    Engine,
    EngineInfo,
    EngineOptions,
    PreparedRequest,
    drain,
    hand_over,
    opens_thinking,
)
from ..prefill import render_with_prefill

try:
    import torch
    from transformers import DynamicCache

    from .batch import KVBatch, mergeable, plan_prefill, prefill_inputs
    from .loading import end_tokens, load, model_name
    from .sampling import Sampler
    from .sentence import SentenceEngine, is_sentence_folder
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependency(
        f"the transformers engine needs {exc.name or 'torch and transformers'}: "
        "pip install 'tokenpipe[transformers]' (CPU torch: pip install torch==2.13.0)"
    ) from None

log = logging.getLogger("tokenpipe.transformers")

StepHook = Callable[[list["_Seq"]], None]

# Padded tokens (rows x longest prompt) one prefill forward may take: about 1 s on the
# 2-core CPU with the bundled model, the longest a burst of arrivals stalls running streams.
PREFILL_TOKENS = 512


@dataclass(eq=False)
class _Seq:
    """One generation as the decode thread sees it."""

    prepared: PreparedRequest
    deliver: Callable[[EngineEvent | BaseException], None]  # runs on `loop`
    loop: asyncio.AbstractEventLoop
    cancelled: bool = False
    generated: int = 0
    next_token: int = -1  # sampled, not yet in the cache
    sampler: Any = None
    detok: Any = None
    guide: Guide | None = None  # the output format's grammar, when the request has one
    out: list[EngineEvent | BaseException] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # until their text is out


class TransformersEngine(Engine):
    def __init__(self, options: EngineOptions, *, step_hook: StepHook | None = None,
                 prefill_tokens: int = PREFILL_TOKENS) -> None:
        """step_hook (tests only) runs in the decode thread before each forward pass with
        the sequences it is about to advance; an exception it raises is a model fault.
        prefill_tokens bounds a prefill group (see _run)."""
        self.options = options
        self.parallel = max(1, options.parallel)
        self.prefill_tokens = prefill_tokens
        self.info = EngineInfo("transformers", options.model_id or model_name(options.model),
                               options.total_context, self.parallel)
        self._step_hook = step_hook
        self._inbox: queue.SimpleQueue[_Seq] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self._model: Any = None
        self._tok: Any = None
        self._pieces: dict[int, bytes] = {}  # token id -> its text as UTF-8 (logprobs)

    logprobs = True  # the log-softmax of the row each token is sampled from

    @classmethod
    def from_options(cls, options: EngineOptions) -> Engine:
        """This engine, or for a sentence-transformers folder the one that embeds it."""
        if is_sentence_folder(options.model):
            return SentenceEngine.from_options(options)
        return cls(options)

    # ---- loading ------------------------------------------------------------------------
    async def load(self) -> None:
        await asyncio.to_thread(self._load)
        self._thread = threading.Thread(target=self._run, name="transformers-decode",
                                        daemon=True)
        self._thread.start()

    def _load(self) -> None:
        source, self._tok, self._model, device, dtype = load(self.options)
        if self.options.chat_template is not None:  # --chat-template: in place of the model's
            self._tok.chat_template = self.options.chat_template
        self._device = device
        config = self._model.config.get_text_config(decoder=True)
        native = getattr(config, "max_position_embeddings", None) or self.options.total_context
        self._eog = end_tokens(self._model, self._tok)
        # transformers 5.x renamed forward's past_key_values to cache (the old name warns).
        params = inspect.signature(self._model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._batchable = mergeable(DynamicCache(config=self._model.config))
        tok, n_logits = self._tok, int(self._model.get_output_embeddings().weight.shape[0])
        self._guides = build_in_background(lambda: Guides.for_hf(tok, n_logits),
                                           "transformers-guides")
        max_batch = self.parallel if self._batchable else 1
        self.info = EngineInfo("transformers", self.info.model_id,
                               min(int(native), self.options.total_context), max_batch)
        log.info("loaded %s on %s (%s): context %d, batch %d", source, device, dtype,
                 self.info.context_tokens, max_batch)

    def check_output(self, request: GenerationRequest) -> None:
        for inside in (False, True) if request.reasoning_budget is not None else (False,):
            grammar = grammar_for(request, inside=inside)  # both: the prompt decides
            assert grammar is not None
            self._guides.result().check(*grammar)

    # ---- text ---------------------------------------------------------------------------
    def render(self, request: GenerationRequest) -> str:
        if request.prompt is not None:
            return request.prompt
        # a last assistant message is the start of the answer (engines/prefill.py)
        return render_with_prefill(request, self._render_chat)

    def _render_chat(self, request: GenerationRequest) -> str:
        template = getattr(self._tok, "chat_template", None)
        messages, tools = chat_messages(request, template_takes_tools(template))
        if not template:  # a plain transcript, as llamacpp
            return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        text: str = self._tok.apply_chat_template(messages, tools=tools,
                                                  add_generation_prompt=True, tokenize=False)
        return text

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        """Special tokens written in the text (the template's) are parsed as such; the
        tokenizer's own BOS/EOS are added only with add_special (raw completions)."""
        ids: list[int] = self._tok(text, add_special_tokens=add_special)["input_ids"]
        return ids

    def encode(self, request: GenerationRequest, text: str) -> list[int]:
        # A raw completion gets the tokenizer's own BOS where it adds one (the chat template
        # writes its own).
        return self.tokenize(text, add_special=request.prompt is not None)

    def _detokenizer(self, prompt_ids: Sequence[int]) -> IdDetokenizer:
        tok = self._tok
        return IdDetokenizer(lambda ids: tok.decode(ids, skip_special_tokens=True), prompt_ids)

    # ---- streaming (event loop side) ----------------------------------------------------
    def healthy(self) -> bool:
        return self._failure is None and self._thread is not None and self._thread.is_alive()

    async def stream(self, prepared: PreparedRequest) -> AsyncIterator[EngineEvent]:
        if not self.healthy():
            raise EngineUnavailable(self._failure or "the transformers engine is not running")
        items: asyncio.Queue[EngineEvent | BaseException] = asyncio.Queue()
        seq = _Seq(prepared, items.put_nowait, asyncio.get_running_loop())
        self._inbox.put(seq)
        self._wake.set()
        try:
            yield EngineStart(prepared.prompt_tokens)
            while True:
                item = await items.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, EngineFinish):
                    return
        finally:  # closed, cancelled or done: the decode thread drops it before its next step
            seq.cancelled = True
            self._wake.set()

    async def aclose(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30)
        self._model = None
        gc.collect()

    # ---- the decode thread --------------------------------------------------------------
    def _run(self) -> None:
        waiting: deque[_Seq] = deque()
        rows: list[_Seq] = []  # rows[i] is row i of batch
        try:
            with torch.inference_mode():
                self._loop(waiting, rows)
        except BaseException as exc:  # a bug in this loop: its batch state is unknown
            self._recover(exc, [*rows, *waiting])
            return
        left = [*rows, *waiting, *drain(self._inbox)]
        for seq in left:
            seq.out.append(EngineUnavailable("the transformers engine was closed"))
        self._flush(left)

    def _loop(self, waiting: deque[_Seq], rows: list[_Seq]) -> None:
        """Runs until closed; `waiting` and `rows` hold what is in flight (for _recover)."""
        batch = KVBatch(self._device)
        prefilled = False  # the last step was a prefill
        while not self._stop:
            waiting.extend(drain(self._inbox))
            for seq in [s for s in waiting if s.cancelled]:
                waiting.remove(seq)
            rows[:] = self._keep(batch, rows, lambda s: not s.cancelled)
            # Waiting requests are prefilled together, a group bounded by prefill_tokens;
            # between two prefill groups the running sequences take a step, so a burst of
            # arrivals cannot stall them for long.
            if waiting and len(rows) < self.info.max_batch and not (prefilled and rows):
                group = self._take_group(waiting, self.info.max_batch - len(rows))
                try:
                    rows[:] = self._admit(group, batch, rows)
                except BaseException:
                    rows.extend(s for s in group if s not in rows)  # in flight too
                    raise
                prefilled = True
            elif rows:
                rows[:] = self._decode(batch, rows)
                prefilled = False
            else:
                self._wake.wait()
                self._wake.clear()

    def _recover(self, exc: BaseException, in_flight: list[_Seq]) -> None:
        """Ends the generations in flight with the reason and starts a fresh decode thread
        with an empty batch (the model stays loaded)."""
        reason = f"the transformers decode loop failed: {type(exc).__name__}: {exc}"
        log.error("%s; recovering", reason, exc_info=exc)
        self.failures += 1
        for seq in in_flight:
            seq.out.append(EngineError(reason))
        self._flush(in_flight)
        if self._stop:
            return
        thread = threading.Thread(target=self._run, name="transformers-decode", daemon=True)
        thread.start()
        self._thread = thread  # running before anyone sees it (healthy() reads it)
        self.restarts += 1
        log.warning("transformers engine recovered (restart %d)", self.restarts)

    def _take_group(self, waiting: deque[_Seq], room: int) -> list[_Seq]:
        """Removes from `waiting` the requests to prefill now: the oldest, and others of a
        similar length while the padded group fits the budget (batch.plan_prefill)."""
        picked = plan_prefill([s.prepared.prompt_tokens for s in waiting], room,
                              self.prefill_tokens)
        group = [waiting[i] for i in picked]
        for seq in group:
            waiting.remove(seq)
        return group

    def _keep(self, batch: KVBatch, rows: list[_Seq], alive: Callable[[_Seq], bool]
              ) -> list[_Seq]:
        keep = [i for i, s in enumerate(rows) if alive(s)]
        batch.keep(keep)
        return [rows[i] for i in keep]

    def _admit(self, group: list[_Seq], batch: KVBatch, rows: list[_Seq]) -> list[_Seq]:
        """Prefills `group` in one forward and appends the sequences that go on to the batch."""
        prompts = [list(seq.prepared.prompt_ids) for seq in group]
        for seq, prompt in zip(group, prompts, strict=True):
            request = seq.prepared.request
            seq.sampler = Sampler(request.params, prompt, self._device)
            seq.detok = self._detokenizer(prompt)
            grammar = grammar_for(request, inside=opens_thinking(seq.prepared))
            if grammar is not None:  # checked in prepare(): compiled and cached
                seq.guide = self._guides.result().start(*grammar)
        long = [s for s in group if s.prepared.prompt_tokens > PROGRESS_TOKENS]
        for seq in long:  # one forward does the whole prefill: its start, then its end
            seq.out.append(EngineProgress(0, seq.prepared.prompt_tokens))
        self._flush(long)
        try:
            if self._step_hook is not None:
                self._step_hook(list(group))
            cache = DynamicCache(config=self._model.config)
            out = self._model(**prefill_inputs(prompts, self._device), use_cache=True,
                              logits_to_keep=1, **{self._cache_arg: cache})
            logits = out.logits[:, -1, :]
            for seq in long:
                seq.out.append(EngineProgress(seq.prepared.prompt_tokens,
                                              seq.prepared.prompt_tokens))
            tokens = [self._choose(s, logits[i]) for i, s in enumerate(group)]
        except Exception as exc:
            self._fail(group, exc)
            return rows
        live = [i for i, (s, t) in enumerate(zip(group, tokens, strict=True))
                if self._emit(s, t)]
        if live:  # a request cancelled during the forward, or already done, is left out
            joined = KVBatch.prefilled(cache, [len(p) for p in prompts], self._device)
            joined.keep(live)
            batch.merge(joined)
            rows = [*rows, *(group[i] for i in live)]
        self._flush(group)
        return rows

    def _decode(self, batch: KVBatch, rows: list[_Seq]) -> list[_Seq]:
        try:
            if self._step_hook is not None:
                self._step_hook(list(rows))
            out = self._model(**batch.step_inputs([s.next_token for s in rows]),
                              use_cache=True, logits_to_keep=1, **{self._cache_arg: batch.cache})
            logits = out.logits[:, -1, :]
            greedy = logits.argmax(dim=-1).tolist()
            tokens = [greedy[i] if s.sampler.plain_greedy and s.guide is None
                      and s.prepared.request.params.logprobs is None
                      else self._choose(s, logits[i]) for i, s in enumerate(rows)]
        except Exception as exc:  # the batch's cache is unusable: every row fails
            self._fail(rows, exc)
            batch.keep([])
            return []
        live = {id(s) for s, t in zip(rows, tokens, strict=True) if self._emit(s, t)}
        self._flush(rows)
        return self._keep(batch, rows, lambda s: id(s) in live)

    def _choose(self, seq: _Seq, logits: torch.Tensor) -> int:
        sampler: Sampler = seq.sampler
        if seq.guide is not None:  # in place on a float32 CPU row (a copy for other dtypes)
            row = logits.float().cpu()
            seq.guide.constrain(row.numpy())
            logits = row if logits.device.type == "cpu" else row.to(logits.device)
        top = seq.prepared.request.params.logprobs
        if top is None:
            return int(logits.argmax()) if sampler.plain_greedy else sampler.sample(logits)
        # before the sampler: its penalties change the row in place
        view = logits.float().cpu().numpy().copy()
        token = int(logits.argmax()) if sampler.plain_greedy else sampler.sample(logits)
        seq.logprobs.append(token_logprob(view, token, top, self._piece))
        return token

    def _piece(self, token: int) -> bytes:
        """A token's text as UTF-8 (a token that ends inside a character decodes to U+FFFD
        here: the HF tokenizer gives no bytes of its own)."""
        data = self._pieces.get(token)
        if data is None:
            data = self._pieces[token] = self._tok.decode([token]).encode()
        return data

    def _emit(self, seq: _Seq, token: int) -> bool:
        """Queues the token's text (and the finish); True if the sequence goes on."""
        seq.generated += 1
        seq.sampler.accept(token)
        seq.next_token = token
        finish: FinishReason | None = None
        if token in self._eog:
            finish = FinishReason.STOP
            if seq.logprobs:  # the end token is not part of the answer
                seq.logprobs.pop()
        else:
            text = seq.detok.feed(token)
            if text and seq.logprobs:  # with the text that completes them
                seq.out.append(EngineText(text, logprobs=tuple(seq.logprobs)))
                seq.logprobs.clear()
            else:
                seq.out.append(EngineText(text))
            guide = seq.guide
            if guide is not None and not guide.accept(token):  # this generation alone
                seq.out.append(guide.failure())  # the library's limit: a 400
                return False
            if guide is not None and guide.done:  # nothing but the end may follow
                finish = FinishReason.STOP
            elif seq.generated >= seq.prepared.max_tokens:
                finish = FinishReason.LENGTH
        if finish is None:
            return not seq.cancelled
        tail = seq.detok.flush()
        if tail or seq.logprobs:
            seq.out.append(EngineText(tail, tokens=0, logprobs=tuple(seq.logprobs)))
            seq.logprobs.clear()
        seq.out.append(EngineFinish(finish, Usage(seq.prepared.prompt_tokens, seq.generated)))
        return False

    def _fail(self, seqs: list[_Seq], exc: Exception) -> None:
        log.warning("transformers forward failed: %s: %s", type(exc).__name__, exc)
        error = EngineError(f"model failure: {type(exc).__name__}: {exc}")
        for seq in seqs:
            seq.out.append(error)
        self._flush(seqs)

    @staticmethod
    def _flush(seqs: Sequence[_Seq]) -> None:
        """Delivers what each sequence produced this step: one callback per event loop."""
        outbox = []
        for seq in seqs:
            items, seq.out = seq.out, []
            outbox.append((seq, items))
        hand_over(outbox)
