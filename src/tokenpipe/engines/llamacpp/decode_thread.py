"""The llama.cpp engine's decode thread: it owns the contexts, admits waiting sequences
into their KV tier (tiers.py) and slot (slots.py), plans each step's rows (one token per
decoding sequence plus chunks of waiting prompts, sized by time: pace.py), runs one
llama_decode a tier, hands each step's events to the event loop at once (with
--speculate, a lone decoding sequence's drafted tokens ride in its step: speculate.py,
drafted from its own tokens or by a draft model: draft.py),
opens the shared tier when a sequence first needs it and frees it once idle, ends itself
once idle (PARK_AFTER_S: compute.py says why) and recovers from a fault with fresh
contexts. LlamaCppEngine (engine.py) inherits it; what it reads of
the engine is declared below."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque

import llama_cpp as lc

from ...constrain import Guides, OnFirstUse
from ...errors import EngineError, EngineUnavailable
from ...types import EngineEvent, EngineProgress
from ..base import EngineInfo, drain, hand_over
from ..prefill import prefill_of
from . import speculate
from .draft import DraftModel, ModelDraft
from .pace import CHUNK_MAX, PromptPace
from .progress import progress
from .sampler import make_sampler
from .slots import Seq
from .speculate import Lookup, VerifyCost, produce, timed_decode
from .tiers import Tier, move_prefix, tier_for
from .vocab import Vocab

log = logging.getLogger("tokenpipe.llamacpp")

PROMPT_CHUNK = CHUNK_MAX  # a long prompt's tokens a step at most: it reports progress
PARK_AFTER_S = 1.0  # an idle decode thread ends after this; the next sequence starts one
_Row = tuple[Seq, int, int, bool]  # (sequence, token, position, wants logits)


class DecodeThread:
    """The decode thread's half of LlamaCppEngine (engine.py builds and loads the state)."""

    info: EngineInfo
    determinism: str
    failures: int
    restarts: int
    _inbox: queue.SimpleQueue[Seq]
    _wake: threading.Event
    _stop: bool
    _thread: threading.Thread | None
    _turn: threading.Lock  # between parking and a submission
    _parked: bool  # the decode thread has ended while idle
    _failure: str | None
    _tiers: list[Tier]
    _vocab: Vocab
    _guides: OnFirstUse[Guides]
    _batch_cap: int
    shared_tier_keep_alive: float
    speculate: str  # "off", "ngram" or "draft"
    speculate_policy: str  # speculate.POLICIES
    speculate_draft: int  # drafted tokens a step, at most
    _verify_cost: VerifyCost
    _draft: DraftModel | None  # --draft-model, once loaded
    _pace: PromptPace

    def _new_context(self) -> None:
        raise NotImplementedError  # engine.py: fresh contexts for the loaded model

    def _free_run_state(self) -> None:
        raise NotImplementedError  # engine.py: frees the contexts

    def _open_tier(self, tier: Tier) -> None:
        raise NotImplementedError  # engine.py: allocates a tier's context

    def _close_tier(self, tier: Tier) -> None:
        raise NotImplementedError  # engine.py: frees a tier's context

    def _run(self) -> None:
        waiting: deque[Seq] = deque()
        active: list[Seq] = []
        try:
            self._loop(waiting, active)
        except BaseException as exc:  # the context is in an unknown state
            self._recover(exc, [*active, *waiting])

    def _loop(self, waiting: deque[Seq], active: list[Seq]) -> None:
        idle_since: float | None = None
        while not self._stop:
            waiting.extend(drain(self._inbox))
            self._drop_cancelled(waiting, active)
            self._admit(waiting, active)
            wait_s = self._close_idle_tiers(active)
            if not active:
                if not waiting and wait_s is None:  # nothing to do now or later
                    idle_since = idle_since or time.monotonic()
                    wait_s = PARK_AFTER_S - (time.monotonic() - idle_since)
                    if wait_s <= 0 and self._park():
                        return
                self._wake.wait(wait_s)
                self._wake.clear()
                continue
            idle_since = None
            self._step(active)

    def _park(self) -> bool:
        """Ends the decode thread, unless a sequence has just come (compute.py: the
        thread's OpenMP team would slow the decodes of the process's other engines);
        _submit starts another."""
        with self._turn:
            if not self._inbox.empty() or self._stop:
                return False
            self._parked = True
            return True

    def _submit(self, seq: Seq) -> None:
        """Hands seq to the decode thread (from the event loop), starting one if it has
        parked."""
        with self._turn:
            self._inbox.put(seq)
            if self._parked:
                self._parked = False
                self._start_thread()
        self._wake.set()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._run, name="llamacpp-decode", daemon=True)
        thread.start()
        self._thread = thread  # running before anyone sees it (healthy() reads it)

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
            self._start_thread()
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
            if not tier.is_open:
                self._open_for(seq, tier)
            if not tier.slots.free or not self._assign(seq, tier, active):
                full.add(id(tier))  # no slot, or no room until one ends
                if len(full) == len(self._tiers):
                    return
                continue
            waiting.remove(seq)
            active.append(seq)

    def _open_for(self, seq: Seq, tier: Tier) -> None:
        """A conversation outgrew the split tier: the shared tier's cells are allocated now
        (a few hundred ms), the start of its prefill where a prefill is reported."""
        if len(seq.prompt) > PROMPT_CHUNK:
            hand_over([(seq, [EngineProgress(0, len(seq.prompt))])])
        started = time.perf_counter()
        self._open_tier(tier)
        log.info("opened the KV cache's %s tier in %.0f ms", tier.label,
                 (time.perf_counter() - started) * 1000)

    def _close_idle_tiers(self, active: list[Seq]) -> float | None:
        """Frees a lazy tier unused for shared_tier_keep_alive; the seconds until the next
        one is due (None: none open)."""
        due: float | None = None
        for tier in self._tiers:
            if not (tier.lazy and tier.is_open) or any(s.tier is tier for s in active):
                continue
            left = self.shared_tier_keep_alive - (time.monotonic() - tier.last_used)
            if left <= 0:
                self._close_tier(tier)
                log.info("freed the KV cache's %s tier (unused for %g s)", tier.label,
                         self.shared_tier_keep_alive)
            else:
                due = left if due is None else min(due, left)
        return due

    def _assign(self, seq: Seq, tier: Tier, active: list[Seq]) -> bool:
        if not tier.slots.assign(seq, [other for other in active if other.tier is tier]):
            return False
        seq.tier = tier
        move_prefix(seq, self._tiers)
        request = seq.prepared.request
        seq.sampler = make_sampler(request.params, self._vocab.n_tokens,
                                   seq.prompt, self.info.context_tokens)
        grammar = seq.prepared.grammar_text()
        if grammar is not None:  # checked in prepare(): compiled and cached
            seq.guide = self._guides.result().start(
                *grammar, prefill=prefill_of(request) or "",
                compiled=seq.prepared.compiled.pop(grammar[0], None))
        if self.speculate == "ngram":
            speculate.start(seq, Lookup(seq.prompt), self.speculate_policy,
                            self.speculate_draft)
        elif self.speculate == "draft" and self._draft is not None:
            speculate.start(seq, ModelDraft(self._draft, seq.prompt), self.speculate_policy,
                            self.speculate_draft)
        return True

    def _release(self, seq: Seq) -> None:
        seq.tier.slots.release(seq)
        seq.tier.last_used = time.monotonic()
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
        waiting prompts, the shortest first, sorted by slot (llama.cpp puts rows in
        one ubatch only for increasing, consecutive sequence ids: each run is one graph)."""
        rows: list[_Row] = []
        for seq in active:
            if seq.donor is not None and seq.donor.n_past >= seq.share:
                seq.tier.slots.take_from_donor(seq)
            if not seq.todo:
                rows.append((seq, seq.last, seq.n_past, True))
        if len(rows) == 1 and rows[0][0].spec is not None:  # drafts pay for a lone sequence
            seq = rows[0][0]
            draft = seq.spec.plan(seq.max_tokens - seq.generated - 1, self._verify_cost)
            rows.extend((seq, token, seq.n_past + 1 + j, True) for j, token in enumerate(draft))
        # beside decoding rows, what keeps their step short (pace.py)
        tiers = len({id(seq.tier) for seq in active if seq.tier is not None})
        budget = min(self._batch_cap - len(rows), self._pace.chunk(len(rows), max(1, tiers)))
        # the shortest prompt first: a short question's first token does not wait for a
        # long document's prefill beside it (the long one still moves on every step that
        # has budget left after the short ones)
        for seq in sorted((s for s in active if s.todo), key=lambda s: len(s.todo)):
            if seq.donor is None and budget > 0:
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
        previous: Seq | None = None  # the last row's sequence, if that row wants logits
        for i, (seq, token, pos, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq.slot, logits
            if logits and seq is not previous:  # a sequence's first row with logits
                seq.batch_index = i
            previous = seq if logits else None
        batch.n_tokens = len(rows)
        # the price of verifying drafts: steps of one decoding sequence, timed
        lone = rows[0][0].spec is not None and all(row[0] is rows[0][0] and row[3]
                                                   for row in rows)
        started = time.perf_counter()
        rc = timed_decode(self._verify_cost if lone else None, len(rows),
                          tier.context.ctx, batch)
        self._pace.record(len(rows), time.perf_counter() - started)
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
        for seq in dict.fromkeys(row[0] for row in rows if row[3]):
            items, ended = produce(seq, self._vocab)  # drafts verified in order
            if ended:
                active.remove(seq)
                self._release(seq)
            outbox.append((seq, items))
        return outbox
