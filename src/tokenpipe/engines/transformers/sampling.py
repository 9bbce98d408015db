"""Per-request sampling over one row of logits, for the transformers engine.

generate() takes neither a torch.Generator nor per-row settings, so each request gets its
own Sampler: penalties, then temperature, top-k, top-p and min-p, then a draw from the
request's own generator. A seeded request therefore gives the same text whatever else is
decoding beside it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import torch

from ...types import SamplingParams


class Sampler:
    """Chooses each next token of one sequence; remembers the tokens the penalties need."""

    def __init__(self, params: SamplingParams, prompt_ids: Sequence[int], device: torch.device):
        self.params = params
        self.repetition = params.repetition_penalty != 1.0
        self.counted = params.presence_penalty != 0.0 or params.frequency_penalty != 0.0
        # Like generate()'s RepetitionPenaltyLogitsProcessor the repetition penalty covers the
        # prompt too; presence and frequency (OpenAI's meaning) count only generated tokens.
        self._seen: set[int] = set(prompt_ids) if self.repetition else set()
        self._counts: Counter[int] = Counter()
        self._device = device
        self.generator: torch.Generator | None = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else random.getrandbits(63)
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)

    @property
    def plain_greedy(self) -> bool:
        """Argmax over the raw logits: the batch takes these rows in one call."""
        return self.params.greedy and not (self.repetition or self.counted)

    def accept(self, token: int) -> None:
        if self.repetition:
            self._seen.add(token)
        if self.counted:
            self._counts[token] += 1

    def sample(self, logits: torch.Tensor) -> int:
        """logits: one row, shape [vocab]; may be modified in place."""
        logits = logits.float()
        if self.repetition and self._seen:
            ids = torch.tensor(sorted(self._seen), device=logits.device)
            chosen = logits[ids]
            penalty = self.params.repetition_penalty
            logits[ids] = torch.where(chosen < 0, chosen * penalty, chosen / penalty)
        if self.counted and self._counts:
            ids = torch.tensor(list(self._counts), device=logits.device)
            counts = torch.tensor(list(self._counts.values()), device=logits.device,
                                  dtype=logits.dtype)
            logits[ids] -= (self.params.presence_penalty
                            + self.params.frequency_penalty * counts)
        if self.params.greedy:
            return int(torch.argmax(logits))
        return self._draw(logits / self.params.temperature)

    def _draw(self, logits: torch.Tensor) -> int:
        params = self.params
        if 0 < params.top_k < logits.shape[-1]:
            kth = torch.topk(logits, params.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
            cut = before >= params.top_p
            cut[0] = False  # the most likely token always stays
            sorted_probs = sorted_probs.masked_fill(cut, 0.0)
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        if params.min_p > 0.0:
            probs = probs.masked_fill(probs < params.min_p * probs.max(), 0.0)
        return int(torch.multinomial(probs, 1, generator=self.generator))
