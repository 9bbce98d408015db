"""Embeddings on llama.cpp: a second context over the loaded model, with embeddings on and
the model's pooling, on a thread of its own for each request (compute.py: a thread that
lived on after decoding would slow every later llama_decode of the process).

Pooling: what the GGUF declares (`<arch>.pooling_type`: mean, cls, last for embedding
models). A generative model declares none, where llama.cpp pools nothing (one vector per
token, which llama-server refuses on /v1/embeddings); it then pools the last token, as
Ollama does for such a model: under causal attention only the last token has read the
whole input. Vectors are L2-normalized, as llama-server's and Ollama's are.

The decode thread (engine.py) never waits for this context: the two share only the read-only
weights, so a stream goes on while inputs embed; each llama_decode here holds at most
EMBED_WINDOW tokens, so the two threads take turns on the cores in short steps.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import llama_cpp as lc

from ...errors import BadRequest, ContextOverflow, EngineError
from ..base import Embedded, EmbedInput
from .compute import OwnThreads

log = logging.getLogger("tokenpipe.llamacpp")

EMBED_WINDOW = 2048  # tokens of one input at most, and of one llama_decode
MAX_SEQUENCES = 64  # inputs one llama_decode holds
# tokens one llama_decode holds (unless one input has more): its attention is computed
# over all of them, inputs of other sequences masked, so a big step costs quadratically
STEP_TOKENS = 256
POOLING_NAMES = {lc.LLAMA_POOLING_TYPE_MEAN: "mean", lc.LLAMA_POOLING_TYPE_CLS: "cls",
                 lc.LLAMA_POOLING_TYPE_LAST: "last"}


class EmbedWorker:
    """The engine's embed(): texts tokenized, checked and embedded on a thread that ends
    with the request (requests take turns), never on the event loop or the decode thread."""

    def __init__(self, embedder: Embedder, tokenize: Callable[[str], Sequence[int]]) -> None:
        self.embedder = embedder
        self._tokenize = tokenize
        self._threads = OwnThreads("llamacpp-embed")

    async def embed(self, inputs: Sequence[EmbedInput], truncate: bool) -> Embedded:
        given = list(inputs)
        return await self._threads.run(lambda: self._embed(given, truncate))

    def _embed(self, inputs: list[EmbedInput], truncate: bool) -> Embedded:
        ids = [self.embedder.check(self._tokenize(x) if isinstance(x, str) else x, i,
                                   truncate=truncate) for i, x in enumerate(inputs)]
        return Embedded(self.embedder.run(ids), sum(len(x) for x in ids))

    async def aclose(self) -> None:
        """Waits for the embedding running, then frees the context (before the model)."""
        await asyncio.to_thread(self._threads.close)
        self.embedder.close()


class Embedder:
    """One embedding context over `model`, opened at the first use and kept; not
    thread-safe: one caller at a time (the engine's single embedding worker)."""

    def __init__(self, model: Any, n_vocab: int, threads: int, window: int) -> None:
        self.model = model
        self.n_vocab = n_vocab
        self.threads = threads
        self.window = window
        self.size = int(lc.llama_model_n_embd(model))
        self.pooling: str | None = None  # known once the context is open
        self._ctx: Any = None
        self._batch: Any = None

    def check(self, ids: Sequence[int], index: int, *, truncate: bool) -> list[int]:
        """One input's ids as they will be embedded: cut to the window when `truncate`;
        BadRequest for what cannot be."""
        if not ids:
            raise BadRequest(f"input[{index}] is empty: send some text", param="input")
        bad = next((t for t in ids if not 0 <= t < self.n_vocab), None)
        if bad is not None:
            raise BadRequest(f"input[{index}] has token id {bad}, outside this model's "
                             f"vocabulary of {self.n_vocab}", param="input")
        if len(ids) > self.window:
            if not truncate:
                raise ContextOverflow(
                    f"input[{index}] has {len(ids)} tokens; this model embeds at most "
                    f"{self.window}: shorten it (or ask to truncate)", param="input")
            return list(ids[:self.window])
        return list(ids)

    def run(self, inputs: Sequence[Sequence[int]]) -> list[list[float]]:
        """The pooled, normalized vector of each input (each within the window)."""
        self._open()
        vectors: list[list[float]] = []
        for group in _groups(inputs, STEP_TOKENS, MAX_SEQUENCES):
            vectors.extend(self._decode(group))
        return vectors

    def _open(self) -> None:
        if self._ctx is not None:
            return
        ctx = self._context(lc.LLAMA_POOLING_TYPE_UNSPECIFIED)
        if lc.llama_pooling_type(ctx) == lc.LLAMA_POOLING_TYPE_NONE:  # a generative model
            lc.llama_free(ctx)
            ctx = self._context(lc.LLAMA_POOLING_TYPE_LAST)
        self.pooling = POOLING_NAMES.get(lc.llama_pooling_type(ctx), "other")
        self._ctx = ctx
        self._batch = lc.llama_batch_init(self.window, 0, 1)
        log.info("embeddings: %d dimensions, %s pooling, %d tokens an input", self.size,
                 self.pooling, self.window)

    def _context(self, pooling: int) -> Any:
        cparams = lc.llama_context_default_params()
        # every input whole in one ubatch: llama.cpp pools a sequence within one
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = self.window
        cparams.n_seq_max = MAX_SEQUENCES
        cparams.kv_unified = True  # the inputs of one decode share the window's cells
        cparams.n_threads = cparams.n_threads_batch = self.threads
        cparams.embeddings = True
        cparams.pooling_type = pooling
        cparams.no_perf = True
        ctx = lc.llama_init_from_model(self.model, cparams)
        if not ctx:
            raise EngineError("llama.cpp could not create an embedding context")
        return ctx

    def _decode(self, group: Sequence[Sequence[int]]) -> list[list[float]]:
        batch, i = self._batch, 0
        for seq, ids in enumerate(group):
            for pos, token in enumerate(ids):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
                batch.seq_id[i][0], batch.logits[i] = seq, True
                i += 1
        batch.n_tokens = i
        lc.llama_memory_clear(lc.llama_get_memory(self._ctx), True)
        status = lc.llama_decode(self._ctx, batch)
        if status != 0:
            raise EngineError(f"llama.cpp could not embed (llama_decode returned {status})")
        out = []
        for seq in range(len(group)):
            pooled = lc.llama_get_embeddings_seq(self._ctx, seq)
            if not pooled:
                raise EngineError("llama.cpp pooled no embedding")
            out.append(_normalized(pooled[:self.size]))
        return out

    def close(self) -> None:
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx is not None:
            lc.llama_free(self._ctx)
            self._ctx = None


def _groups(inputs: Sequence[Sequence[int]], tokens_max: int,
            most: int) -> Iterator[Sequence[Sequence[int]]]:
    """The inputs in order, as runs of at most `most` inputs and `tokens_max` tokens (or
    one input alone that has more)."""
    start, tokens = 0, 0
    for i, ids in enumerate(inputs):
        if i > start and (tokens + len(ids) > tokens_max or i - start == most):
            yield inputs[start:i]
            start, tokens = i, 0
        tokens += len(ids)
    if start < len(inputs):
        yield inputs[start:]


def _normalized(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else vector
