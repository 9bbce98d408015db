"""The transformers engine: engine.py (loading, text, the stream's event-loop side),
decode_thread.py (the decode loop), next_token.py (a row of logits to the next token and its
events), batch.py (the left-padded KV batch), sampling.py (per-request sampling),
loading.py (finding and loading a model). kind.py declares its options and capabilities;
importing the package imports torch only when the engine is asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import PREFILL_TOKENS, TransformersEngine

__all__ = ["PREFILL_TOKENS", "TransformersEngine"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
