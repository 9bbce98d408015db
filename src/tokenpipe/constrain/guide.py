"""Token masks from llguidance, for one engine's vocabulary.

`Guides` (one per loaded model) checks and caches compiled grammars; `Guide` (one per
generation, owned by the engine's decode thread) masks each step's logits in place before
sampling and follows the sampled token. The mask is applied through a byte lookup table:
a boolean-index assignment of 49k logits costs ~300 µs on this machine (branchy), the
table lookup and add ~35 µs (scripts/measure_constrain.py prints both)."""

from __future__ import annotations

import concurrent.futures
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BadRequest

if TYPE_CHECKING:
    import llguidance

CACHE_SIZE = 64  # compiled grammars kept per model (a schema compiles in 1-100 ms)

# LUT[b] holds the 8 additive biases of mask byte b: 0 where the token's bit is set, -inf
# where it is not (llguidance's bit i of 32-bit word j is token 32*j+i; little-endian bytes).
_LUT = np.where(
    np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little") == 1,
    np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


class Guides:
    """Compiled grammars for one vocabulary. Thread-safe: the event loop (or a prepare
    thread) checks a format, the decode thread starts guides."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, n_logits: int) -> None:
        self.tokenizer = tokenizer
        self.n_logits = n_logits  # the model's logits per row (may exceed the vocabulary)
        self.n_vocab = tokenizer.vocab_size
        self._compiled: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def for_llamacpp(cls, vocab: Any, n_logits: int) -> Guides:
        """From a llama.cpp vocabulary (about 0.4 s for 49k tokens: build once per model)."""
        from llguidance.llamacpp import lltokenizer_from_vocab

        with warnings.catch_warnings():  # llguidance 1.9 calls a deprecated llama.cpp alias
            warnings.filterwarnings("ignore", "llama_token_get_attr", DeprecationWarning)
            return cls(lltokenizer_from_vocab(vocab), n_logits)

    @classmethod
    def for_hf(cls, tokenizer: Any, n_logits: int) -> Guides:
        """From a Hugging Face (fast) tokenizer."""
        import llguidance.hf

        return cls(llguidance.hf.from_tokenizer(tokenizer), n_logits)

    def check(self, grammar: str, param: str) -> None:
        """Compiles `grammar` (or finds it compiled); BadRequest naming `param`, with the
        library's reason, when it cannot be: never a silently unconstrained answer."""
        self._pristine(grammar, param)

    def start(self, grammar: str) -> Guide:
        """A guide at the grammar's start, for one generation."""
        return Guide(self._pristine(grammar, "response_format").deep_copy(), self)

    def _pristine(self, grammar: str, param: str) -> llguidance.LLMatcher:
        import llguidance

        with self._lock:
            matcher = self._compiled.get(grammar)
            if matcher is not None:
                self._compiled.move_to_end(grammar)
                return matcher
        # no grammar dump in the error a client reads (the library's default is verbose)
        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0,
                                       limits=llguidance.LLParserLimits(verbose_errors=False))
        if matcher.is_error():
            raise BadRequest(f"the output format cannot be enforced: {matcher.get_error()}",
                             param=param)
        with self._lock:
            self._compiled[grammar] = matcher
            while len(self._compiled) > CACHE_SIZE:
                self._compiled.popitem(last=False)
        return matcher


def build_in_background(build: Callable[[], Guides], name: str
                        ) -> concurrent.futures.Future[Guides]:
    """Builds an engine's Guides in a thread of its own (the library's view of a 49k
    vocabulary takes ~0.4 s), beside the rest of the model's load; the first request
    with a format waits for it in its prepare thread."""
    future: concurrent.futures.Future[Guides] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(build())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


class Guide:
    """One generation's place in its grammar."""

    def __init__(self, matcher: llguidance.LLMatcher, guides: Guides) -> None:
        self._matcher = matcher
        self._n_vocab = guides.n_vocab
        words = (guides.n_vocab + 31) // 32
        self._mask = np.zeros(words, dtype=np.uint32)
        self._bias = np.empty((words * 4, 8), dtype=np.float32)

    def constrain(self, logits: np.ndarray[Any, np.dtype[np.float32]]) -> None:
        """Sets, in place, every logit the grammar forbids at this step to -inf."""
        self._matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        np.take(_LUT, self._mask.view(np.uint8), axis=0, out=self._bias)
        bias = self._bias.reshape(-1)
        n = min(self._n_vocab, logits.shape[0])
        np.add(logits[:n], bias[:n], out=logits[:n])
        if logits.shape[0] > n:  # rows wider than the vocabulary: padding, never allowed
            logits[n:] = -np.inf

    def accept(self, token: int) -> bool:
        """Follows the sampled token; False if the grammar refused it (a token the mask
        allowed always passes: a refusal is a bug, and `error` says what happened)."""
        return bool(self._matcher.consume_token(token))

    @property
    def error(self) -> str:
        return str(self._matcher.get_error())

    @property
    def done(self) -> bool:
        """The grammar is complete: nothing but the end of the answer may follow."""
        return bool(self._matcher.is_stopped())
