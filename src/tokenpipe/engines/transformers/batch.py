"""A batch of sequences decoding together over one transformers DynamicCache.

Rows are right-aligned (left padding): every row's next token goes in the same cache
column, and a 2-D attention mask hides each row's padding. Newcomers are prefilled
together, left-padded to the longest of them (prefill_inputs), and join by padding the
shorter of (batch, newcomers) on the left and concatenating along the batch dimension; a
sequence leaves by index selection, after which columns that are padding in every row are
cut off. Keys already carry their rotary positions, so moving them between columns changes
nothing; position ids are passed per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

# At most this share of a prefill group's padded tokens may be padding (plan_prefill).
PAD_SHARE = 0.25


def mergeable(cache: DynamicCache) -> bool:
    """Only plain full-attention layers can be re-padded; sliding or hybrid ones cannot."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def plan_prefill(lengths: Sequence[int], room: int, budget: int) -> list[int]:
    """Which waiting prompts (their token counts, oldest first) to prefill in one forward:
    indices, always 0 first. The others are taken closest in length to the oldest first,
    while the group fits in `room`, its padded size (rows x longest) stays within `budget`
    and at most PAD_SHARE of it is padding. The oldest goes alone if nothing fits, even
    when it alone exceeds the budget."""
    chosen, longest, total = [0], lengths[0], lengths[0]
    for i in sorted(range(1, len(lengths)), key=lambda i: abs(lengths[i] - lengths[0])):
        if len(chosen) >= room:
            break
        width = max(longest, lengths[i])
        padded = (len(chosen) + 1) * width
        if padded <= budget and padded - total - lengths[i] <= PAD_SHARE * padded:
            chosen.append(i)
            longest, total = width, total + lengths[i]
    return chosen


def prefill_inputs(prompts: Sequence[Sequence[int]], device: torch.device) -> dict[str, Any]:
    """Model kwargs (without the cache) that prefill `prompts` in one forward, left-padded
    to the longest. A single prompt is passed as it is: no mask, no positions."""
    if len(prompts) == 1:
        return {"input_ids": torch.tensor([list(prompts[0])], device=device)}
    mask = _left_aligned([len(p) for p in prompts], device)
    ids = torch.zeros(mask.shape, dtype=torch.long, device=device)  # pad id: masked anyway
    ids[mask.bool()] = torch.tensor([t for p in prompts for t in p], device=device)
    return {"input_ids": ids, "attention_mask": mask,
            "position_ids": (mask.cumsum(dim=1) - 1).clamp(min=0)}


class KVBatch:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=device)
        self.positions: list[int] = []  # per row: tokens of that row in the cache

    @classmethod
    def prefilled(cls, cache: DynamicCache, lengths: Sequence[int],
                  device: torch.device) -> KVBatch:
        """The batch a prefill_inputs forward left in `cache`: row i holds lengths[i]
        tokens, left-padded to the longest."""
        batch = cls(device)
        batch.cache, batch.mask = cache, _left_aligned(lengths, device)
        batch.positions = list(lengths)
        return batch

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def merge(self, other: KVBatch) -> None:
        """Appends the rows of `other` (which is consumed) after this batch's rows."""
        if not other.positions:
            return
        if self.cache is None or not self.positions:
            self.cache, self.mask, self.positions = other.cache, other.mask, other.positions
            return
        assert other.cache is not None
        width = max(self.width, other.width)
        layers: list[Any] = self.cache.layers  # all DynamicLayer: see mergeable()
        theirs_layers: list[Any] = other.cache.layers
        for mine, theirs in zip(layers, theirs_layers, strict=True):
            mine.keys = torch.cat([_pad(mine.keys, width), _pad(theirs.keys, width)])
            mine.values = torch.cat([_pad(mine.values, width), _pad(theirs.values, width)])
        self.mask = torch.cat([F.pad(self.mask, (width - self.width, 0)),
                               F.pad(other.mask, (width - other.width, 0))])
        self.positions = [*self.positions, *other.positions]

    def keep(self, rows: list[int]) -> None:
        """Keeps only `rows` (indices into the current batch), in that order."""
        if len(rows) == len(self.positions):
            return
        if not rows:
            self.cache = None
            self.mask = torch.zeros((0, 0), dtype=torch.long, device=self.device)
            self.positions = []
            return
        assert self.cache is not None
        index = torch.tensor(rows, device=self.device)
        mask = self.mask.index_select(0, index)
        used = mask.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        self.mask = mask[:, first:]
        layers: list[Any] = self.cache.layers
        for layer in layers:
            layer.keys = layer.keys.index_select(0, index)[:, :, first:, :]
            layer.values = layer.values.index_select(0, index)[:, :, first:, :]
        self.positions = [self.positions[i] for i in rows]

    def step_inputs(self, tokens: list[int]) -> dict[str, Any]:
        """Model kwargs for one decode step (without the cache): token i goes to row i."""
        n = len(tokens)
        self.mask = torch.cat(
            [self.mask, torch.ones((n, 1), dtype=torch.long, device=self.device)], dim=1)
        inputs = {
            "input_ids": torch.tensor(tokens, device=self.device).view(n, 1),
            "position_ids": torch.tensor(self.positions, device=self.device).view(n, 1),
            "attention_mask": self.mask,
            "cache_position": torch.tensor([self.width - 1], device=self.device),
        }
        self.positions = [p + 1 for p in self.positions]
        return inputs


def _left_aligned(lengths: Sequence[int], device: torch.device) -> torch.Tensor:
    """A [rows, longest] mask whose row i has lengths[i] ones at its right end."""
    width = max(lengths)
    columns = torch.arange(width, device=device)
    starts = torch.tensor([width - n for n in lengths], device=device).view(-1, 1)
    return (columns >= starts).long()


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pads the sequence axis (-2) of [batch, heads, seq, dim] to `width`."""
    missing = width - t.shape[-2]
    return F.pad(t, (0, 0, missing, 0)) if missing else t
