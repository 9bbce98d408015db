"""Models already on this machine: the stores (bundled.py, ollama.py, lmstudio.py,
hf_cache.py, folders.py), their GGUF headers (header.py), names to files (catalog.py),
downloads (hub.py) and `tokenpipe models` (listing.py)."""

from .catalog import ModelNotFound, Places, Resolved, resolve

__all__ = ["ModelNotFound", "Places", "Resolved", "resolve"]
