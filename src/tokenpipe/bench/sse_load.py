"""The SSE load: one streamed chat completion per stream over tokenpipe.http, the lean
client the openai engine uses (the request in one write, the events parsed as they
arrive). An httpx client per stream cost the bench about 40 ms of CPU each (most of it
building a TLS context) and wrote head and body apart; on a machine where the bench
shares cores with the servers it measures, that CPU is theirs."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ..http import HTTPError, Origin, SSEDecoder
from .results import StreamResult

if TYPE_CHECKING:
    from .streams import StartLine


async def sse_stream(url: str, args: argparse.Namespace,
                     messages: list[dict[str, str]], line: StartLine) -> StreamResult:
    result = StreamResult()
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    body: dict[str, Any] = {"messages": messages, "max_tokens": args.max_tokens,
                            "temperature": 0.0, "stream": True,
                            "stream_options": {"include_usage": True}}
    if args.model:
        body["model"] = args.model
    if getattr(args, "response_format", None) is not None:
        body["response_format"] = args.response_format
    if getattr(args, "tool_list", None) is not None:
        body.update(tools=args.tool_list, tool_choice="required")
    request = json.dumps(body).encode()
    origin = Origin(url.rstrip("/"), spares=False)
    arrived = False
    try:
        # Connect first, as the WebSocket client does before its clock starts.
        conn = await origin.request("GET", "/v1/models", b"", headers, connect_timeout_s=30)
        await conn.read()
        conn.release()
        arrived = True
        await line.wait()
        result.start()
        conn = await origin.request("POST", "/v1/chat/completions", request,
                                    {"content-type": "application/json", **headers},
                                    connect_timeout_s=30)
        if conn.status != 200:
            result.error = f"http {conn.status}"
            conn.close()
            return result
        decoder = SSEDecoder()
        while (raw := await conn.receive()) is not None:
            for event in decoder.feed(raw):
                if not event.data.startswith("{"):  # [DONE]
                    continue
                chunk = json.loads(event.data)
                if chunk.get("usage"):
                    result.tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("tool_calls"):
                        result.arrived()
        conn.release()
        result.stop()
    except HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if not arrived:
            line.leave()
        origin.close()
    return result
