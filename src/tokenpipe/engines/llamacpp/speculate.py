"""Speculative decoding that never changes the answer (`--speculate ngram`).

Drafts come from the sequence itself (prompt lookup): the longest of its last 3, 2 or 1
tokens that occurred before, in the prompt or the answer so far, proposes the tokens that
followed it there. A step then decodes the sequence's next token and its k drafted tokens
as k + 1 rows of one llama_decode. Under `--determinism exact` a row's logits do not depend
on what shares its llama_decode (exact.py; the load-time check decodes a row inside a chunk
and alone), so row j holds the very logits that decoding one token at a time would give.

Verification samples the rows in order, exactly as one token a step does: the output
grammar's mask, then argmax or the request's one sampler chain, then logprobs and the text
(next_token.py). It stops at the first row whose token is not the drafted one; the tokens
sampled up to there are the answer's, the KV cells of the drafted tokens after it are
removed. The chain's random draws therefore stay one per answer token, in order: a seeded
sample does not depend on how many tokens were verified together, and a drafted token the
grammar forbids is never sampled (rejected). Under `--determinism fast` llama.cpp's kernels
for k + 1 rows differ from those for one: speculation may change the answer there.

Drafts have two sources: the lookup above (`--speculate ngram`), or a draft model of the
same vocabulary (`--speculate draft`, `--draft-model NAME`: draft.py), whose greedy
continuation of the sequence is the draft. Verification is the same for both.

Whether to draft, and how many, follows the price (VerifyCost: the engine's measured
seconds a step of w rows of one sequence) and the sequence's recent acceptance: a draft of
k is made when the expected tokens of a step, (1 - a^(k+1)) / (1 - a) at acceptance a,
beat what its rows cost against one, plus, for a draft model, what drafting k tokens
costs (k of its one-row decodes, timed; the length is chosen before drafting then). With
several sequences decoding, nothing is drafted.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import llama_cpp as lc

from ...types import EngineEvent, EngineFinish, EngineText
from .next_token import next_token
from .slots import Seq
from .vocab import Vocab

NGRAMS = (3, 2, 1)  # the suffix lengths looked up, longest first
DRAFT_MAX = 8  # drafted tokens a step, at most (the default of --speculate-draft)
POLICIES = ("adaptive", "always")
PROBE_EVERY = 256  # steps without a draft before a short one is tried (price, acceptance)
_MARGIN = 1.05  # a draft must promise this much over plain decoding
_KEPT = 15  # steps of each width whose median prices it


class Source(Protocol):
    """Where a sequence's drafts come from: Lookup, or draft.ModelDraft."""

    priced: bool  # drafting costs time of its own: the length is chosen before drafting

    def append(self, token: int) -> None: ...

    def draft(self, k: int) -> list[int]: ...

    @property
    def seconds_per_token(self) -> float | None: ...


class Lookup:
    """The sequence's tokens so far and, for each n-gram, where it last ended."""

    priced = False  # a lookup costs next to nothing: what it finds is then cut to length
    seconds_per_token = None

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = list(tokens)
        self._last: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # n-grams ending before this position are in _last

    def append(self, token: int) -> None:
        self.tokens.append(token)

    def draft(self, k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest
        matching suffix; [] when none occurred before."""
        tokens, last = self.tokens, self._last
        end = len(tokens) - 1  # the suffix itself ends here: index what ends before it
        for i in range(self._indexed, end):
            for n in NGRAMS:
                if i + 1 >= n:
                    last[tuple(tokens[i + 1 - n : i + 1])] = i
        self._indexed = max(self._indexed, end)
        for n in NGRAMS:
            if len(tokens) >= n:
                at = last.get(tuple(tokens[-n:]))
                if at is not None:
                    return tokens[at + 1 : at + 1 + k]
        return []


class VerifyCost:
    """Seconds a llama_decode of w rows of one sequence takes (w = 1: plain decoding): the
    median of the engine's last steps of that width (a loaded machine's spikes do not move
    it much). Owned by the decode thread."""

    def __init__(self) -> None:
        self._steps: dict[int, deque[float]] = {}
        self._seconds: dict[int, float] = {}  # the medians, kept current

    def record(self, rows: int, seconds: float) -> None:
        steps = self._steps.setdefault(rows, deque(maxlen=_KEPT))
        steps.append(seconds)
        self._seconds[rows] = statistics.median(steps)

    def seconds(self, rows: int) -> float | None:
        """The median seconds of a step of `rows` rows, None before one was measured."""
        return self._seconds.get(rows)

    def ratio(self, rows: int) -> float | None:
        """A step of `rows` against one of one row; a width not measured yet takes the
        price of each added row from the nearest measured width. None until one row and
        some wider step are both measured."""
        one = self._seconds.get(1)
        measured = [w for w in self._seconds if w > 1]
        if one is None or not measured:
            return None
        many = self._seconds.get(rows)
        if many is not None:
            return many / one
        near = min(measured, key=lambda w: abs(w - rows))
        return 1.0 + (self._seconds[near] / one - 1.0) * (rows - 1) / (near - 1)


@dataclass(eq=False)
class Speculation:
    """One sequence's drafts: their source, its recent acceptance and its counters."""

    source: Source
    policy: str = "adaptive"
    most: int = DRAFT_MAX  # drafted tokens a step, at most
    draft: list[int] = field(default_factory=list)  # this step's, being verified
    drafted: int = 0
    accepted: int = 0
    rate: float = 0.7  # recent share of drafted tokens accepted (exponential average)
    idle: int = 0  # steps since the last draft

    def plan(self, limit: int, cost: VerifyCost) -> list[int]:
        """This step's draft (also kept in .draft), at most `limit` tokens."""
        limit = min(limit, self.most)
        if limit > 0 and self.policy == "adaptive" and self.source.priced:
            limit = self._length(limit, cost)  # a draft model's draft is paid for first
        draft = self.source.draft(limit) if limit > 0 else []
        if draft and self.policy == "adaptive" and not self.source.priced:
            draft = draft[: self._length(len(draft), cost)]
        self.idle = 0 if draft else self.idle + 1
        self.draft = draft
        return draft

    def _length(self, most: int, cost: VerifyCost) -> int:
        if cost.ratio(2) is None:  # not priced yet: a short draft, then a step without
            return 0 if self.idle == 0 and self.drafted else min(most, 2)
        if self.idle >= PROBE_EVERY:  # measure again: the machine or the text may differ
            return min(most, 2)
        a = min(self.rate, 0.99)
        drafting = self.source.seconds_per_token  # a drafted token's own price, if any
        one = cost.seconds(1)
        per_draft = drafting / one if drafting is not None and one else 0.0
        best, best_gain = 0, _MARGIN
        for k in range(1, most + 1):
            price = (cost.ratio(k + 1) or 1.0) + k * per_draft
            gain = (1 - a ** (k + 1)) / (1 - a) / price
            if gain > best_gain:
                best, best_gain = k, gain
        return best

    def verified(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.rate = 0.7 * self.rate + 0.3 * (accepted / drafted)


def start(seq: Seq, source: Source, policy: str, most: int) -> None:
    """Gives seq a Speculation whose drafts come from `source` (over its prompt)."""
    seq.spec = Speculation(source, policy, most)


def produce(seq: Seq, vocab: Vocab) -> tuple[list[EngineEvent | BaseException], bool]:
    """next_token for each of seq's rows of the last decode, in order, while the sampled
    token is the drafted one; removes the cells of the drafted tokens that were not. The
    step's first text event carries its drafted and accepted counts (an empty one where
    the step made no text), the finish the sequence's."""
    spec = seq.spec
    if spec is None:
        return next_token(seq, vocab)
    draft, spec.draft = spec.draft, []
    items: list[EngineEvent | BaseException] = []
    accepted = 0
    while True:
        got, ended = next_token(seq, vocab)
        items.extend(got)
        spec.source.append(seq.last)
        if accepted < len(draft) and seq.last == draft[accepted]:
            accepted += 1
            if not ended:
                seq.batch_index += 1
                continue
        break
    if not draft:
        return items, ended
    spec.verified(len(draft), accepted)
    seq.drafted, seq.accepted = spec.drafted, spec.accepted
    drop = len(draft) - accepted
    if drop:  # the rows after the last accepted token hold tokens not in the answer
        seq.n_past -= drop
        lc.llama_memory_seq_rm(seq.tier.context.mem, seq.slot, seq.n_past, -1)
        del seq.tier.slots.cached[seq.slot][-drop:]
    carried = False
    for i, item in enumerate(items):
        if isinstance(item, EngineText) and not carried:
            items[i], carried = replace(item, drafted=len(draft), accepted=accepted), True
        elif isinstance(item, EngineFinish):  # made before this step was counted
            items[i] = replace(item, usage=replace(item.usage, drafted_tokens=spec.drafted,
                                                   accepted_tokens=spec.accepted))
    if not carried:  # the step ended the answer without text: the counts go alone
        items.insert(0, EngineText("", tokens=0, drafted=len(draft), accepted=accepted))
    return items, ended


def timed_decode(cost: VerifyCost | None, rows: int, ctx: object, batch: object) -> int:
    """llama_decode, its time recorded in `cost` for `rows` rows of one decoding sequence
    (None: a step of another shape, not recorded)."""
    if cost is None:
        return int(lc.llama_decode(ctx, batch))
    started = time.perf_counter()
    rc = int(lc.llama_decode(ctx, batch))
    cost.record(rows, time.perf_counter() - started)
    return rc
