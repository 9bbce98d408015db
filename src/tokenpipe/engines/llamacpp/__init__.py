"""The llama.cpp engine: engine.py (loading, text, the stream's event-loop side),
decode_thread.py (admission, each step's rows, llama_decode, recovery), next_token.py (a
decoded row to the next token and its events), speculate.py (drafts verified in one
decode), draft.py (a draft model's drafts), slots.py (the prompt cache's slots), tiers.py
(the KV cache's layout), vocab.py (tokens and the chat template), sampler.py (what each
sampling parameter means here), exact.py (kernels whose answers depend on the request
alone), threadpool.py (one persistent ggml thread pool), decode_steps.py (the bench).

kind.py declares its options and capabilities; importing the package imports llama.cpp only
when LlamaCppEngine is asked for, so that the declaration stays light."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import LlamaCppEngine

__all__ = ["LlamaCppEngine"]


def __getattr__(name: str) -> Any:
    if name == "LlamaCppEngine":
        from .engine import LlamaCppEngine

        return LlamaCppEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
