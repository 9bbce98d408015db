"""A draft model for `--speculate draft` (`--draft-model NAME`): a second, smaller model of
the same vocabulary, loaded beside the engine's, whose greedy continuation of the lone
decoding sequence is the draft that speculate.py verifies in the main model's decode.

It has a context of its own for one sequence, decoding on the engine's thread pool between
the main model's steps, with llama.cpp's default (fast) kernels: a draft only proposes, the
main model's rows decide, so the draft model's arithmetic never reaches the answer. Its KV
cells follow the tokens it was last given: each draft keeps the common prefix with the
sequence's tokens so far (the accepted drafts), removes the cells after it (the rejected
ones) and decodes what is new (the prompt, on a sequence's first draft; the token sampled
after the last accepted one, then). A later conversation that shares a prefix reuses it.

The adaptive policy pays for a draft before it sees it, so it prices one drafted token as
the median of the draft model's recent one-row decodes (seconds_per_token)."""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp as lc
import numpy as np

from ...errors import EngineError
from .context import Context
from .slots import common_prefix

_KEPT = 31  # one-row decodes whose median prices a drafted token
SEQ = 0  # the draft context's one sequence


def token_texts(vocab: Any) -> list[bytes]:
    """Every token's text in a llama.cpp vocabulary (its handle), by id."""
    return [lc.llama_vocab_get_text(vocab, i) for i in range(lc.llama_vocab_n_tokens(vocab))]


def vocab_mismatch(model: Sequence[bytes], draft: Sequence[bytes]) -> str | None:
    """None when the two vocabularies are the same (every id has the same text), else what
    differs: the sizes, or the first id whose text does."""
    if len(model) != len(draft):
        return f"{len(model)} tokens against {len(draft)}"
    for i, (a, b) in enumerate(zip(model, draft, strict=True)):
        if a != b:
            return f"token {i} is {a!r} in one and {b!r} in the other"
    return None


class DraftModel:
    """The draft model's weights and (between _new_context and _free_run_state) its
    context. Owned by the decode thread once loaded."""

    def __init__(self, path: Path, model: Any) -> None:
        self.path = path
        self._model = model
        self._vocab = lc.llama_model_get_vocab(model)
        self.n_tokens: int = lc.llama_vocab_n_tokens(self._vocab)
        self.context: Context | None = None
        self.cached: list[int] = []  # the tokens its cells hold
        self._seconds: deque[float] = deque(maxlen=_KEPT)

    @classmethod
    def load(cls, path: Path, model_texts: Sequence[bytes], model_name: str) -> DraftModel:
        """Loads the draft model; an EngineError naming both models when its vocabulary is
        not the model's (`model_texts`: token_texts of the engine's model)."""
        if not path.is_file():
            raise EngineError(f"draft model file not found: {path}")
        model = lc.llama_model_load_from_file(str(path).encode(),
                                              lc.llama_model_default_params())
        if not model:
            raise EngineError(f"llama.cpp could not load the draft model {path}")
        why = vocab_mismatch(model_texts, token_texts(lc.llama_model_get_vocab(model)))
        if why is not None:
            lc.llama_model_free(model)
            raise EngineError(f"the draft model {path.name} and the model {model_name} have "
                              f"different vocabularies ({why}): a draft model must share "
                              "the model's tokenizer")
        return cls(path, model)

    @property
    def n_ctx_train(self) -> int:
        return int(lc.llama_model_n_ctx_train(self._model))

    def open(self, cells: int, threads: int) -> Context:
        """Its context: `cells` for one sequence (the engine attaches it to its pool)."""
        self.close()
        self.context = Context.open(self._model, "fast", cells=cells, shared=False,
                                    parallel=1, threads=threads, batch_min=0)
        return self.context

    def close(self) -> None:
        if self.context is not None:
            self.context.close()
            self.context = None
        self.cached = []

    def free(self) -> None:
        self.close()
        if self._model:
            lc.llama_model_free(self._model)
            self._model = None

    @property
    def seconds_per_token(self) -> float | None:
        """What drafting one token costs: the median of the recent one-row decodes (None
        before the first)."""
        return statistics.median(self._seconds) if self._seconds else None

    def draft(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to k tokens greedily following `tokens` (a sequence's prompt and answer so
        far, its last sampled token included); fewer where one ends generation, none where
        the sequence would not fit its context or a decode fails."""
        context = self.context
        if context is None or k <= 0 or not tokens or \
                len(tokens) + k > context.context_tokens:
            return []
        common = min(common_prefix(self.cached, tokens), len(tokens) - 1)
        if common < len(self.cached):  # drafts the answer did not take, or another sequence
            lc.llama_memory_seq_rm(context.mem, SEQ, common, -1)
            del self.cached[common:]
        todo = list(tokens[common:])
        for start in range(0, len(todo), context.batch_cap):
            if not self._decode(todo[start : start + context.batch_cap]):
                return []
        out: list[int] = []
        while True:
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(context.ctx, -1),
                                           shape=(self.n_tokens,))
            token = int(np.argmax(logits))
            out.append(token)
            if len(out) == k or lc.llama_vocab_is_eog(self._vocab, token):
                return out
            if not self._decode([token]):
                return []

    def _decode(self, tokens: list[int]) -> bool:
        """Decodes tokens after the cached ones (logits for the last); False, and the cells
        emptied, where llama_decode fails (a draft is only ever a proposal)."""
        context = self.context
        assert context is not None
        batch = context.batch
        at = len(self.cached)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, at + i, 1
            batch.seq_id[i][0], batch.logits[i] = SEQ, i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        started = time.perf_counter()
        rc = lc.llama_decode(context.ctx, batch)
        if rc != 0:
            lc.llama_memory_seq_rm(context.mem, SEQ, -1, -1)
            self.cached = []
            return False
        if len(tokens) == 1:
            self._seconds.append(time.perf_counter() - started)
        self.cached.extend(tokens)
        return True


class ModelDraft:
    """One sequence's draft source for speculate.Speculation (as Lookup is for ngram): its
    tokens so far, drafted from by the draft model."""

    priced = True  # a draft costs the draft model's decodes: the policy sizes it first

    def __init__(self, model: DraftModel, tokens: Sequence[int]) -> None:
        self.model = model
        self.tokens = list(tokens)

    def append(self, token: int) -> None:
        self.tokens.append(token)

    def draft(self, k: int) -> list[int]:
        return self.model.draft(self.tokens, k)

    @property
    def seconds_per_token(self) -> float | None:
        return self.model.seconds_per_token
