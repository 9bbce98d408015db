"""Token log-probabilities: computed from one row of logits (both local engines), and put
beside the text they belong to as the answer streams (the scheduler).

A token's log-probability is the log-softmax of the logits the engine sampled from, after
the output format's grammar mask (a masked token is -inf and never listed), before
penalties, temperature and top-k/top-p/min-p: the model's own distribution over what the
grammar allows. The alignment follows each token's text through the thinking and
tool-call splitters and the stop matcher, so a chunk carries the tokens whose text it
carries, whatever was held back on the way.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from .text import StopMatcher
from .types import Part, TokenLogprob

MAX_TOP = 20  # OpenAI's bound on top_logprobs


def log_softmax_top(row: np.ndarray, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of `token` under `row`'s softmax, and the `k` likeliest tokens
    with theirs, best first (tokens at -inf left out). One pass over the vocabulary."""
    peak = float(row.max())
    # float32 throughout (numpy sums pairwise: ~1e-6 off a float64 sum, at half the cost)
    lse = peak + math.log(float(np.exp(row - np.float32(peak)).sum()))
    top: list[tuple[int, float]] = []
    if k > 0:
        k = min(k, row.shape[0])
        ids = np.argpartition(row, -k)[-k:]
        ids = ids[np.argsort(-row[ids], kind="stable")]
        top = [(int(i), float(row[i]) - lse) for i in ids if math.isfinite(row[i])]
    return float(row[token]) - lse, top


def token_logprob(row: np.ndarray, token: int, k: int,
                  piece: Callable[[int], bytes]) -> TokenLogprob:
    """`token`'s TokenLogprob from its logits row; `piece` gives a token's bytes."""
    value, top = log_softmax_top(row, token, k)
    data = piece(token)
    alternatives = []
    for i, lp in top:
        b = piece(i)
        alternatives.append((b.decode("utf-8", "replace"), lp, b))
    return TokenLogprob(data.decode("utf-8", "replace"), value, data, tuple(alternatives))


class LogprobAligner:
    """Which tokens' log-probabilities go with the content text released now.

    Offsets are in characters: each engine piece spans [s, e) of the raw text; the content
    is the raw text's end from `start` on (the splitters only ever drop a prefix: a
    thinking section, a tool-call wrapper), and the stop matcher releases a prefix of the
    content. A token goes out with the text that completes it; when a stop string cuts
    the answer, a token whose text starts before the cut goes out with the last text and
    the stop string's own tokens are dropped, as are a thinking section's and tool calls'."""

    def __init__(self, stop: StopMatcher) -> None:
        self.stop = stop
        self._raw = 0  # characters the engine produced
        self._content = 0  # content characters the splitters passed to the stop matcher
        self._released = 0  # content characters the stop matcher let through
        self._start: int | None = None  # where the content starts in the raw text
        self._held: deque[tuple[int, int, tuple[TokenLogprob, ...]]] = deque()

    def engine_text(self, text: str, entries: tuple[TokenLogprob, ...]) -> None:
        start = self._raw
        self._raw += len(text)
        if entries:
            self._held.append((start, self._raw, entries))

    def feed(self, text: str) -> str:
        """Content text into the stop matcher (in place of stop.feed)."""
        if text and self._start is None:  # the first content ends where the raw text does
            self._start = self._raw - len(text)
        self._content += len(text)
        out = self.stop.feed(text)
        self._released += len(out)
        return out

    def flush(self) -> str:
        out = self.stop.flush()
        self._released += len(out)
        return out

    def take(self, final: bool) -> tuple[TokenLogprob, ...]:
        """The entries whose text has been released (with `final`: the last ones; the
        rest are dropped)."""
        held, start = self._held, self._start
        if start is None:
            if final:
                held.clear()
            return ()
        out: list[TokenLogprob] = []
        cut = final and self.stop.stopped
        while held:
            s, e, entries = held[0]
            if e < start or (e == start and e > s):  # before the content: not reported
                held.popleft()
                continue
            if e - start <= self._released or (cut and s - start < self._released):
                held.popleft()
                offset = max(s - start, 0)
                out.extend(replace(x, offset=offset) for x in entries)
                continue
            break
        if final:
            held.clear()
        return tuple(out)


def attach(pieces: list[str | Part], entries: tuple[TokenLogprob, ...]) -> list[str | Part]:
    """`entries` onto the last content text of `pieces` (a content Part); onto an empty one
    at the end when the pieces hold no content."""
    if not entries:
        return pieces
    for i in range(len(pieces) - 1, -1, -1):
        piece = pieces[i]
        if isinstance(piece, str) and piece:
            return [*pieces[:i], Part(piece, "content", logprobs=entries), *pieces[i + 1:]]
    return [*pieces, Part("", "content", logprobs=entries)]
