"""The HTTP/WebSocket server: create_app(settings) and thin transport adapters."""

from .app import create_app

__all__ = ["create_app"]
