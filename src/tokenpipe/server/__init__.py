"""The HTTP/WebSocket server: create_app(settings) and thin transport adapters. Loaded on
first use, so that reading the door table (doors.py, the CLI does) loads no server."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
