"""Server-sent events, encoded (sans-IO): one `data:` line per event (named with an
`event:` line where the door's clients dispatch on it), comment lines for pings, queue
positions and prefill progress, the `[DONE]` that ends an OpenAI stream."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

DONE = b"data: [DONE]\n\n"


def data(obj: BaseModel | dict[str, Any]) -> bytes:
    """One SSE event; JSON never holds a raw newline, so one data line suffices."""
    if isinstance(obj, BaseModel):
        payload = obj.model_dump_json()
    else:
        payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return b"data: " + payload.encode() + b"\n\n"


def comment(text: str) -> bytes:
    """A comment line: SSE clients (the OpenAI SDKs too) skip it; proxies see traffic."""
    return b": " + text.replace("\r", " ").replace("\n", " ").encode() + b"\n\n"


def waiting(position: int, loading: bool) -> bytes:
    """The comment a request hears while it waits: its model loading, or its queue place."""
    return comment("loading model" if loading else f"queued position={position}")


def progress(done: int, total: int) -> bytes:
    """The comment a long prompt's prefill sends before the first token: tokens done/all."""
    return b": prefill %d/%d\n\n" % (done, total)


def event(name: str, obj: dict[str, Any]) -> bytes:
    """A named event (`event:` then `data:`), as Anthropic's Messages stream sends them."""
    payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return b"event: " + name.encode() + b"\ndata: " + payload.encode() + b"\n\n"
