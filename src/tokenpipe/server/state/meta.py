"""A stream's meta hash in Redis (`P:TOKEN:meta`), written by the replica that produces it
and read by any replica a client resumes on: the stream id its reader calls it by, the
model and door, the request with its resolved max_tokens (for a take-over), and the SSE
rendering (chunk id, created, usage, token ids) so that every replica renders it alike."""

from __future__ import annotations

import json
from typing import Any

from ..resumable import Held
from . import codec


def meta_of(held: Held) -> dict[Any, str]:
    session = held.session
    out: dict[Any, str] = {"stream_id": held.stream_id, "model": session.model,
                           "api": session.api}
    if not session.loading:
        prepared = session.prepared
        out["scored"] = "1" if prepared.request.params.logprobs is not None else ""
        out["request"] = codec.encode_request(prepared.request)
        out["max_tokens"] = str(prepared.max_tokens)
    sse = held.sse
    shape = getattr(sse, "shape", None)
    if shape is not None:
        out["sse"] = json.dumps({"kind": type(shape).__name__, "head": shape.head,
                                 "usage": bool(getattr(sse, "include_usage", False)),
                                 "ids": shape.ids})
    return out


def origin_of(fields: dict[str, str]) -> object:
    """The SSE rendering the producer chose (the same chunk id and created on every
    replica)."""
    from ...protocol.openai.render import ChatRender, CompletionRender
    from ..openai.resumable_sse import SseOrigin

    scored = bool(fields.get("scored"))
    if "sse" not in fields:  # a v1 stream: rendered as chat chunks from this resume on
        return SseOrigin(ChatRender(fields["model"], scored=scored))
    data = json.loads(fields["sse"])
    cls = CompletionRender if data["kind"] == "CompletionRender" else ChatRender
    shape = cls(fields["model"], scored=scored, ids=data.get("ids", False))
    shape.head = data["head"]
    return SseOrigin(shape, data["usage"])
