"""tokenpipe: stream a local LLM's answer token by token."""

__version__ = "0.1.0"

__all__ = ["__version__"]
