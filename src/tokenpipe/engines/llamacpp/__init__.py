"""The llama.cpp engine: engine.py (loading, streaming, the decode thread), slots.py (the
prompt cache's slots), vocab.py (tokens and the chat template), sampler.py (what each
sampling parameter means here), exact.py (kernels whose answers depend on the request
alone), threadpool.py (one persistent ggml thread pool), decode_steps.py (the bench)."""

from .engine import LlamaCppEngine

__all__ = ["LlamaCppEngine"]
