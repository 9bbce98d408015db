"""A batch of sequences decoding together over one transformers DynamicCache.

Rows are right-aligned (left padding): every row's next token goes in the same cache
column, and a 2-D attention mask hides each row's padding. A sequence joins after its own
prefill by padding the shorter of (batch, newcomer) on the left and concatenating along
the batch dimension; a sequence leaves by index selection, after which columns that are
padding in every row are cut off. Keys already carry their rotary positions, so moving
them between columns changes nothing; position ids are passed per row.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def mergeable(cache: DynamicCache) -> bool:
    """Only plain full-attention layers can be re-padded; sliding or hybrid ones cannot."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


class KVBatch:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=device)
        self.positions: list[int] = []  # per row: tokens of that row in the cache

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def width(self) -> int:
        return int(self.mask.shape[1])

    def add(self, cache: DynamicCache, length: int) -> None:
        """Appends one prefilled sequence (a batch-1 cache holding `length` tokens)."""
        row_mask = torch.ones((1, length), dtype=torch.long, device=self.device)
        if self.cache is None or not self.positions:
            self.cache, self.mask, self.positions = cache, row_mask, [length]
            return
        width = max(self.width, length)
        layers: list[Any] = self.cache.layers  # all DynamicLayer: see mergeable()
        theirs_layers: list[Any] = cache.layers
        for mine, theirs in zip(layers, theirs_layers, strict=True):
            mine.keys = torch.cat([_pad(mine.keys, width), _pad(theirs.keys, width)])
            mine.values = torch.cat([_pad(mine.values, width), _pad(theirs.values, width)])
        self.mask = torch.cat([F.pad(self.mask, (width - self.width, 0)),
                               F.pad(row_mask, (width - length, 0))])
        self.positions.append(length)

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


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """Left-pads the sequence axis (-2) of [batch, heads, seq, dim] to `width`."""
    missing = width - t.shape[-2]
    return F.pad(t, (0, 0, missing, 0)) if missing else t
