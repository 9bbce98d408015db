"""Token masks from llguidance, for one engine's vocabulary.

`Guides` (one per loaded model) checks and caches compiled grammars; `Guide` (one per
generation, owned by the engine's decode thread) masks each step's logits in place before
sampling and follows the sampled token. The mask is applied through a byte lookup table:
a boolean-index assignment of 49k logits costs ~300 µs on this machine (branchy), the
table lookup and add ~35 µs (scripts/measure_constrain.py prints both)."""

from __future__ import annotations

import ctypes
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BadRequest, EngineError, TokenpipeError
from ..types import GenerationRequest
from .grammars import grammar_for
from .vocabularies import View

if TYPE_CHECKING:
    import llguidance

CACHE_SIZE = 64  # compiled grammars kept per model (a schema compiles in 1-100 ms)
# and at most this much memory for them, as estimated below; a grammar estimated at more
# than KEEP_BYTES is not kept at all (a tool or format of a few dozen keys takes well under
# 1 MB; a schema of 2,000 keys about 10 MB, and compiles again in ~0.1 s when sent again).
# Beyond the vocabulary's view (~35 MB, once per model), what the server then keeps after
# any number of distinct large schemas stays under 50 MB (issue 31).
CACHE_BYTES = 16 << 20
KEEP_BYTES = 4 << 20
# what a compiled grammar holds per character of its text, at least: 7-10 MB measured for
# the 85 KiB grammar of a 2,000-key schema (tests/e2e/test_hostile_schemas.py)
BYTES_PER_CHAR = 80
# The library's limits, lowered where its defaults let one grammar take hundreds of MB (a
# lexer state costs 1-2 kB; 250,000 by default).
MAX_LEXER_STATES = 50_000
# how the library words a limit it hit ("Current row has 7607 items; max is 2000", "... too
# big (limit for this grammar: ...)", "fuel exhausted")
_LIMIT_WORDS = ("max is", "too big", "limit", "fuel")

# LUT[b] holds the 8 additive biases of mask byte b: 0 where the token's bit is set, -inf
# where it is not (llguidance's bit i of 32-bit word j is token 32*j+i; little-endian bytes).
_LUT = np.where(
    np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little") == 1,
    np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


class Guides:
    """Compiled grammars for one vocabulary. Thread-safe: the event loop (or a prepare
    thread) checks a format, the decode thread starts guides."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, n_logits: int,
                 keep: object = None) -> None:
        """`keep`: what the tokenizer reads, kept alive as long as these guides
        (vocabularies.View)."""
        self.tokenizer = tokenizer
        self._keep = keep
        self.n_logits = n_logits  # the model's logits per row (may exceed the vocabulary)
        self.n_vocab = tokenizer.vocab_size
        self._compiled: OrderedDict[str, tuple[llguidance.LLMatcher, int]] = OrderedDict()
        self._bytes = 0  # the cached grammars' estimated size
        self._lock = threading.Lock()

    @classmethod
    def of(cls, view: View, n_logits: int) -> Guides:
        """From a vocabulary's view (vocabularies.py: built once per model file)."""
        return cls(view.tokenizer, n_logits, keep=view)

    @classmethod
    def for_llamacpp(cls, vocab: Any, n_logits: int) -> Guides:
        """From a llama.cpp vocabulary the caller keeps alive (about 0.3 s for 49k tokens)."""
        from llguidance.llamacpp import lltokenizer_from_vocab

        with warnings.catch_warnings():  # llguidance 1.9 calls a deprecated llama.cpp alias
            warnings.filterwarnings("ignore", "llama_token_get_attr", DeprecationWarning)
            return cls(lltokenizer_from_vocab(vocab), n_logits)

    def check(self, grammar: str, param: str, prefill: str = "") -> llguidance.LLMatcher:
        """Compiles `grammar` (or finds it compiled) and returns it compiled, for start();
        BadRequest naming `param`, with the library's reason, when it cannot be: never a
        silently unconstrained answer. With a `prefill` (the answer begun in a last
        assistant message), BadRequest naming `messages` unless the grammar can begin
        with it."""
        matcher = self._pristine(grammar, param)
        if prefill:
            self._begun(matcher.deep_copy(), prefill, param)
        return matcher

    def start(self, grammar: str, param: str = "response_format", prefill: str = "",
              compiled: Any = None) -> Guide:
        """A guide for one generation (`param`: the field that asked for it, which its
        failure names), at the grammar's start or, with a `prefill`, after it: the answer
        goes on from the prefill, so prefill and answer together are what the grammar
        admits. `compiled`: what check() returned for `grammar` (the decode thread then
        never compiles, even when the cache has let the grammar go since)."""
        matcher = (compiled if compiled is not None
                   else self._pristine(grammar, param)).deep_copy()
        if prefill:
            self._begun(matcher, prefill, param)
        return Guide(matcher, self, param)

    def _begun(self, matcher: llguidance.LLMatcher, prefill: str, param: str) -> None:
        """`matcher` moved past `prefill` (its bytes, as the library's tokenizer cuts them:
        the grammar reads bytes, whatever the tokens)."""
        tokens = self.tokenizer.tokenize_str(prefill)
        if matcher.try_consume_tokens(tokens) < len(tokens) or matcher.is_error():
            raise BadRequest(f"the answer begun in the last assistant message (a prefill) "
                             f"cannot begin an answer that {param} allows: {prefill[:60]!r}",
                             param="messages")

    def _pristine(self, grammar: str, param: str) -> llguidance.LLMatcher:
        import llguidance

        with self._lock:
            entry = self._compiled.get(grammar)
            if entry is not None:
                self._compiled.move_to_end(grammar)
                return entry[0]
        before = _heap()
        # no grammar dump in the error a client reads (the library's default is verbose)
        limits = llguidance.LLParserLimits(verbose_errors=False,
                                           max_lexer_states=MAX_LEXER_STATES)
        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0, limits=limits)
        if not matcher.is_error():
            # the first mask is where the library's runtime limits show (a row of 10,000
            # optional keys): a 400 now, never a failure once the answer has begun
            matcher.compute_bitmask()
        if matcher.is_error():
            raise BadRequest(f"the output format cannot be enforced: {matcher.get_error()}",
                             param=param)
        # the memory a compiled grammar holds, estimated by what the compile kept, and at
        # least BYTES_PER_CHAR of its text: another thread's frees meanwhile (a finished
        # generation's copy of a grammar) can make the heap's difference read as nothing
        size = max(BYTES_PER_CHAR * len(grammar), _heap() - before)
        _trim()  # what the compile freed goes back to the system, not to this thread's arena
        with self._lock:  # (the generation starts from `matcher` itself: returned)
            if grammar not in self._compiled and size <= KEEP_BYTES:
                self._compiled[grammar] = (matcher, size)
                self._bytes += size
            evicted = []
            while self._compiled and (len(self._compiled) > CACHE_SIZE
                                      or self._bytes > CACHE_BYTES):
                evicted.append(self._compiled.popitem(last=False)[1])
                self._bytes -= evicted[-1][1]
        if evicted:
            del evicted  # their memory back to the system too: the next compile's
            _trim()  # estimate then reads what it takes, not pages these freed
        return matcher

    @property
    def cached_bytes(self) -> int:
        """The estimated memory of the grammars kept (CACHE_BYTES at most)."""
        return self._bytes


def check_request(guides: Callable[[], Guides], request: GenerationRequest,
                  prefill: str) -> dict[str, Any]:
    """An engine's check_output: the grammars `request` may be answered under compile
    (with a thinking budget, both: whether the prompt opens the section decides which
    runs), and the answer can go on from its `prefill` (a thinking budget cannot: the
    thinking would have to come first). `guides` is asked for only once the request's
    schemas passed their own checks (the first call may build the vocabulary's view).
    Returns each grammar compiled, by its text (PreparedRequest.compiled)."""
    if prefill and request.reasoning_budget is not None:
        raise BadRequest("a thinking budget starts the answer with its thinking section: "
                         "it cannot go on from a prefill (a last assistant message)",
                         param="reasoning_budget")
    grammars = [grammar_for(request, inside=inside) for inside in (
        (False, True) if request.reasoning_budget is not None else (False,))]
    compiled = {}
    for grammar in grammars:
        assert grammar is not None
        compiled[grammar[0]] = guides().check(*grammar, prefill=prefill)
    return compiled


def _trim() -> None:
    """glibc's malloc_trim(0): freed heap pages back to the system (each grammar thread has
    its own malloc arena, which otherwise keeps what a large compile freed). ctypes
    releases the GIL for the call; elsewhere (no glibc) nothing."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


_LIBC = _libc()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _heap() -> int:
    """Bytes the C heap has handed out and not had back, over every thread's arena
    (glibc's mallinfo2: allocated chunks plus mmapped ones); the grammar library allocates
    there. Unlike the resident size it does not read a compile that reuses pages freed
    before as free (it read 0-2 MB for grammars that hold 10). 0 without glibc 2.33+:
    then the text's size stands for a grammar's."""
    if _MALLINFO2 is None:
        return 0
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)


def _mallinfo2() -> Any:
    fn = getattr(_LIBC, "mallinfo2", None) if _LIBC is not None else None
    if fn is not None:
        fn.restype, fn.argtypes = _Mallinfo2, []
    return fn


_MALLINFO2 = _mallinfo2()


class Guide:
    """One generation's place in its grammar."""

    def __init__(self, matcher: llguidance.LLMatcher, guides: Guides,
                 param: str = "response_format") -> None:
        self._matcher = matcher
        self._param = param
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

    def failure(self) -> TokenpipeError:
        """What a refused token means: past one of the library's limits (a row or a step
        too large for this schema), the client's schema: a 400 naming its field; otherwise
        a bug of ours, an engine_error."""
        error = self.error
        if any(word in error for word in _LIMIT_WORDS):
            return BadRequest(f"the output format is too large for the grammar library "
                              f"mid-answer: {error}", param=self._param)
        return EngineError(f"the output format's grammar failed: {error}")

    @property
    def done(self) -> bool:
        """The grammar is complete: nothing but the end of the answer may follow."""
        return bool(self._matcher.is_stopped())
