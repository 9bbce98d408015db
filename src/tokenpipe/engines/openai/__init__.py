"""The openai engine: an OpenAI-compatible server upstream (engine.py), its replicas'
routing, health and failover (replicas.py), and what its answers mean (answers.py)."""

from .engine import OpenAIEngine

__all__ = ["OpenAIEngine"]
