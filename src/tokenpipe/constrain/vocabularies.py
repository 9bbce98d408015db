"""The grammar library's view of a model's vocabulary (an llguidance LLTokenizer): built
when a request first needs a grammar, not when the model loads, and kept per model file,
so that a model unloaded and loaded again (keep-alive, --max-loaded-models, Ollama's
`keep_alive`) finds it built.

Why: building it holds the GIL for about 100 ms in the library's Rust code (49k tokens and
their slices), which stalled every stream at every model load (issue 31 item 5: 120-240 ms
on a loaded machine), and a client could force reloads. Now a server whose clients never
ask for a format never builds one, and the stall comes once per model file and process,
in the first constrained request's prepare thread (docs/security.md has the figures).

A llama.cpp view reads a vocabulary that must outlive it (the library tokenizes through
it): it keeps a vocabulary-only copy of the model file of its own (~17 MiB), freed when the
view goes, not the engine's model, which an unload frees."""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import EngineError

if TYPE_CHECKING:
    import llguidance

KEPT = 4  # views kept for models not loaded now (each ~40 MiB for a 49k vocabulary)
T = TypeVar("T")


class View:
    """One vocabulary's LLTokenizer, and what it reads (freed with the view)."""

    def __init__(self, tokenizer: llguidance.LLTokenizer,
                 free: Callable[[], None] | None = None) -> None:
        self.tokenizer = tokenizer
        if free is not None:
            weakref.finalize(self, free)


_views: OrderedDict[Hashable, View] = OrderedDict()
_lock = threading.Lock()


def shared(key: Hashable, build: Callable[[], View]) -> View:
    """The view of `key`, built now if no engine of this process built it before (one
    build at a time: a second thread waits for the first's). The last KEPT stay; one an
    engine still uses stays alive with it."""
    with _lock:
        view = _views.get(key)
        if view is None:
            view = _views[key] = build()
        _views.move_to_end(key)
        while len(_views) > KEPT:
            _views.popitem(last=False)
        return view


def llamacpp_view(path: Path) -> View:
    """The view of a GGUF file's vocabulary (the file as it is now: a file replaced on disk
    is another key)."""
    stat = path.stat()
    return shared(("llamacpp", str(path.resolve()), stat.st_size, stat.st_mtime_ns),
                  lambda: _llamacpp_build(path))


def _llamacpp_build(path: Path) -> View:
    import llama_cpp as lc
    from llguidance.llamacpp import lltokenizer_from_vocab

    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise EngineError(f"llama.cpp could not read the vocabulary of {path}")
    try:
        with warnings.catch_warnings():  # llguidance 1.9 calls a deprecated llama.cpp alias
            warnings.filterwarnings("ignore", "llama_token_get_attr", DeprecationWarning)
            tokenizer = lltokenizer_from_vocab(lc.llama_model_get_vocab(model))
    except BaseException:
        lc.llama_model_free(model)
        raise
    return View(tokenizer, lambda: lc.llama_model_free(model))


def hf_view(key: Hashable, tokenizer: Any) -> View:
    """The view of a Hugging Face (fast) tokenizer, by `key` (its source and size)."""
    import llguidance.hf

    return shared(("hf", key), lambda: View(llguidance.hf.from_tokenizer(tokenizer)))


class OnFirstUse(Generic[T]):
    """A value built by the first thread that asks for it (`result()`), once; a build that
    failed is tried again by the next."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: T | None = None
        self._lock = threading.Lock()

    def result(self) -> T:
        with self._lock:
            if self._value is None:
                self._value = self._build()
            return self._value
