"""A long prompt's prefill progress, as the decode thread reports it after each step."""

from __future__ import annotations

from ...types import EngineEvent, EngineProgress
from .slots import Seq

Row = tuple[Seq, int, int, bool]  # (sequence, token, position, wants logits): engine._Row


def progress(rows: list[Row], chunk: int) -> list[tuple[Seq, list[EngineEvent | BaseException]]]:
    """EngineProgress of each prompt this step advanced that has more than `chunk` tokens
    to compute (short prompts send none): its tokens in the cache, of its length. A
    sequence's rows are consecutive (sorted by slot); a row before the prompt's end is a
    prompt token."""
    out: list[tuple[Seq, list[EngineEvent | BaseException]]] = []
    last = None
    for seq, _, pos, _ in rows:
        if seq is not last and pos < len(seq.prompt) and len(seq.prompt) - seq.cached > chunk:
            out.append((seq, [EngineProgress(seq.n_past, len(seq.prompt))]))
        last = seq
    return out
