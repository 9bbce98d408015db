"""The transformers engine's decode thread: one thread owns the model and keeps up to
`parallel` sequences in one left-padded batch (batch.KVBatch); waiting requests are
prefilled together in one forward, a group of similar lengths bounded by prefill_tokens,
and join; between two prefill groups the running sequences take a step. A fault ends the
generations in flight and a fresh thread carries on. TransformersEngine (engine.py)
inherits it; what it reads of the engine is declared below."""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import DynamicCache

from ...constrain import Guides, OnFirstUse
from ...errors import EngineError, EngineUnavailable
from ...text import IdDetokenizer
from ...types import EngineProgress
from ..base import PROGRESS_TOKENS, EngineInfo, drain, hand_over
from ..prefill import prefill_of
from .batch import KVBatch, plan_prefill, prefill_inputs
from .next_token import Seq, choose, emit
from .sampling import Sampler

log = logging.getLogger("tokenpipe.transformers")

StepHook = Callable[[list[Seq]], None]


class DecodeThread:
    """The decode thread's half of TransformersEngine (engine.py builds and loads the state)."""

    info: EngineInfo
    prefill_tokens: int
    failures: int
    restarts: int
    _step_hook: StepHook | None
    _inbox: queue.SimpleQueue[Seq]
    _wake: threading.Event
    _stop: bool
    _thread: threading.Thread | None
    _model: Any
    _device: Any
    _eog: frozenset[int]
    _cache_arg: str
    _guides: OnFirstUse[Guides]

    def _piece(self, token: int) -> bytes:
        raise NotImplementedError  # engine.py: a token's text as UTF-8

    def _detokenizer(self, prompt_ids: Sequence[int]) -> IdDetokenizer:
        raise NotImplementedError  # engine.py: the tokenizer's incremental decoder

    def _run(self) -> None:
        waiting: deque[Seq] = deque()
        rows: list[Seq] = []  # rows[i] is row i of batch
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

    def _loop(self, waiting: deque[Seq], rows: list[Seq]) -> None:
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

    def _recover(self, exc: BaseException, in_flight: list[Seq]) -> None:
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

    def _take_group(self, waiting: deque[Seq], room: int) -> list[Seq]:
        """Removes from `waiting` the requests to prefill now: the oldest, and others of a
        similar length while the padded group fits the budget (batch.plan_prefill)."""
        picked = plan_prefill([s.prepared.prompt_tokens for s in waiting], room,
                              self.prefill_tokens)
        group = [waiting[i] for i in picked]
        for seq in group:
            waiting.remove(seq)
        return group

    def _keep(self, batch: KVBatch, rows: list[Seq], alive: Callable[[Seq], bool]
              ) -> list[Seq]:
        keep = [i for i, s in enumerate(rows) if alive(s)]
        batch.keep(keep)
        return [rows[i] for i in keep]

    def _admit(self, group: list[Seq], batch: KVBatch, rows: list[Seq]) -> list[Seq]:
        """Prefills `group` in one forward and appends the sequences that go on to the batch."""
        prompts = [list(seq.prepared.prompt_ids) for seq in group]
        for seq, prompt in zip(group, prompts, strict=True):
            request = seq.prepared.request
            seq.sampler = Sampler(request.params, prompt, self._device)
            seq.detok = self._detokenizer(prompt)
            grammar = seq.prepared.grammar_text()
            if grammar is not None:  # checked in prepare(): compiled and cached
                seq.guide = self._guides.result().start(
                *grammar, prefill=prefill_of(request) or "",
                compiled=seq.prepared.compiled.pop(grammar[0], None))
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
            tokens = [choose(s, logits[i], self._piece) for i, s in enumerate(group)]
        except Exception as exc:
            self._fail(group, exc)
            return rows
        live = [i for i, (s, t) in enumerate(zip(group, tokens, strict=True))
                if emit(s, t, self._eog)]
        if live:  # a request cancelled during the forward, or already done, is left out
            joined = KVBatch.prefilled(cache, [len(p) for p in prompts], self._device)
            joined.keep(live)
            batch.merge(joined)
            rows = [*rows, *(group[i] for i in live)]
        self._flush(group)
        return rows

    def _decode(self, batch: KVBatch, rows: list[Seq]) -> list[Seq]:
        try:
            if self._step_hook is not None:
                self._step_hook(list(rows))
            out = self._model(**batch.step_inputs([s.next_token for s in rows]),
                              use_cache=True, logits_to_keep=1, **{self._cache_arg: batch.cache})
            logits = out.logits[:, -1, :]
            greedy = logits.argmax(dim=-1).tolist()
            tokens = [greedy[i] if s.sampler.plain_greedy and s.guide is None
                      and s.prepared.request.params.logprobs is None
                      else choose(s, logits[i], self._piece) for i, s in enumerate(rows)]
        except Exception as exc:  # the batch's cache is unusable: every row fails
            self._fail(rows, exc)
            batch.keep([])
            return []
        live = {id(s) for s, t in zip(rows, tokens, strict=True) if emit(s, t, self._eog)}
        self._flush(rows)
        return self._keep(batch, rows, lambda s: id(s) in live)

    def _fail(self, seqs: list[Seq], exc: Exception) -> None:
        log.warning("transformers forward failed: %s: %s", type(exc).__name__, exc)
        error = EngineError(f"model failure: {type(exc).__name__}: {exc}")
        for seq in seqs:
            seq.out.append(error)
        self._flush(seqs)

    @staticmethod
    def _flush(seqs: Sequence[Seq]) -> None:
        """Delivers what each sequence produced this step: one callback per event loop."""
        outbox = []
        for seq in seqs:
            items, seq.out = seq.out, []
            outbox.append((seq, items))
        hand_over(outbox)
