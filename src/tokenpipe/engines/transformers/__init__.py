"""The transformers engine: engine.py (the decode loop), batch.py (the left-padded KV batch),
sampling.py (per-request sampling), loading.py (finding and loading a model)."""

from .engine import PREFILL_TOKENS, TransformersEngine

__all__ = ["PREFILL_TOKENS", "TransformersEngine"]
