"""From the row llama_decode wrote for a sequence to its next token and what it means: the
output grammar's mask, greedy or the sampler chain, logprobs, the text, and the finish
(end of generation, the grammar done, max_tokens)."""

from __future__ import annotations

import llama_cpp as lc
import numpy as np

from ...logprobs import token_logprob
from ...types import EngineEvent, EngineFinish, EngineText, FinishReason, Usage
from .slots import Seq
from .vocab import Vocab


def next_token(seq: Seq, vocab: Vocab) -> tuple[list[EngineEvent | BaseException], bool]:
    """Samples seq's token from its row (seq.batch_index of its tier's last decode): the
    events it yields, and whether the sequence ended (finished, or its grammar failed)."""
    guide = seq.guide
    top = seq.prepared.request.params.logprobs
    logits = None
    ctx = seq.tier.context.ctx
    if seq.sampler is None or guide is not None or top is not None:
        logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, seq.batch_index),
                                       shape=(vocab.n_tokens,))
        if guide is not None:  # in place: the sampler chain reads the same row
            guide.constrain(logits)
    if seq.sampler is None:
        token = int(np.argmax(logits))  # type: ignore[arg-type]  # fetched just above
    else:  # the chain works on a copy of the row: `logits` stays as the model wrote it
        token = lc.llama_sampler_sample(seq.sampler, ctx, seq.batch_index)
    seq.generated += 1
    items: list[EngineEvent | BaseException] = []
    finish: FinishReason | None = None
    if vocab.is_eog(token):
        finish = FinishReason.STOP
    elif top is not None and logits is not None:
        seq.logprobs.append(token_logprob(logits, token, top, vocab.piece))
        text = seq.decoder.feed(vocab.piece(token))
        if text:  # a token that ends inside a character waits for the one that ends it
            items.append(EngineText(text, logprobs=tuple(seq.logprobs), token_ids=(token,)))
            seq.logprobs.clear()
        else:
            items.append(EngineText(text, token_ids=(token,)))
    else:
        items.append(EngineText(seq.decoder.feed(vocab.piece(token)), token_ids=(token,)))
    if finish is None:
        if guide is not None and not guide.accept(token):  # this generation alone
            return [guide.failure()], True  # the library's limit: a 400 naming the field
        if guide is not None and guide.done:  # nothing but the end may follow
            finish = FinishReason.STOP
        elif seq.generated >= seq.max_tokens:
            finish = FinishReason.LENGTH
    seq.last = token
    if finish is None:
        return items, False
    tail = seq.decoder.flush()
    if tail or seq.logprobs:
        items.append(EngineText(tail, tokens=0, logprobs=tuple(seq.logprobs)))
        seq.logprobs.clear()
    items.append(EngineFinish(finish, Usage(len(seq.prompt), seq.generated, seq.cached,
                                             drafted_tokens=seq.drafted,
                                             accepted_tokens=seq.accepted)))
    return items, True
