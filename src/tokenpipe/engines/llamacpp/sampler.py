"""The sampler chain for one request: what each sampling parameter means on llama.cpp."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import llama_cpp as lc

from ...types import SamplingParams


def make_sampler(params: SamplingParams, n_vocab: int, prompt: Sequence[int],
                 window: int) -> Any:
    """None for plain greedy (argmax is cheaper than a sampler chain), else a chain.

    The penalties mean what they mean on the transformers engine and in vLLM: the
    repetition penalty covers the prompt and the answer, presence and frequency (OpenAI's)
    count only the answer's tokens. `window` (the sequence's context) bounds both."""
    repeat = params.repetition_penalty != 1.0
    counted = params.frequency_penalty != 0.0 or params.presence_penalty != 0.0
    if params.greedy and not (repeat or counted):
        return None
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    if repeat:
        sampler = lc.llama_sampler_init_penalties(n_vocab, window, params.repetition_penalty,
                                                  0.0, 0.0)
        for token in prompt[-window:]:  # the chain accepts only what it samples
            lc.llama_sampler_accept(sampler, token)
        lc.llama_sampler_chain_add(chain, sampler)
    if counted:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_penalties(
            n_vocab, window, 1.0, params.frequency_penalty, params.presence_penalty))
    if params.greedy:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        return chain
    if params.top_k > 0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_min_p(params.min_p, 1))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(params.temperature))
    seed = params.seed if params.seed is not None else random.getrandbits(32)
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain

