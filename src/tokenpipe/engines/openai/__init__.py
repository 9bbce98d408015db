"""The openai engine: an OpenAI-compatible server upstream (engine.py), its replicas'
routing, health and failover (replicas.py), and what its answers mean (answers.py); kind.py
declares its options and capabilities (the package imports the engine only when asked)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import OpenAIEngine

__all__ = ["OpenAIEngine"]


def __getattr__(name: str) -> Any:
    if name == "OpenAIEngine":
        from .engine import OpenAIEngine

        return OpenAIEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
