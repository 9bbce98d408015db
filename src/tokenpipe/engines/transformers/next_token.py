"""A generation as the transformers decode thread sees it (Seq), and from a row of logits
to its next token and what that token means: the output grammar's mask, greedy or the
sampler, logprobs, the text, and the finish (end of generation, the grammar done,
max_tokens)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch

from ...constrain import Guide
from ...logprobs import token_logprob
from ...types import EngineEvent, EngineFinish, EngineText, FinishReason, TokenLogprob, Usage
from ..base import PreparedRequest
from .sampling import Sampler


@dataclass(eq=False)
class Seq:
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


def choose(seq: Seq, logits: torch.Tensor, piece: Callable[[int], bytes]) -> int:
    """The token sampled from seq's row of logits: the grammar's mask, greedy or the
    sampler, and the row's logprobs when asked (piece: a token's text as UTF-8)."""
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
    seq.logprobs.append(token_logprob(view, token, top, piece))
    return token



def emit(seq: Seq, token: int, eog: Collection[int]) -> bool:
    """Queues the token's text (and the finish); True if the sequence goes on."""
    seq.generated += 1
    seq.sampler.accept(token)
    seq.next_token = token
    finish: FinishReason | None = None
    if token in eog:
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
