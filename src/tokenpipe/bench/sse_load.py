"""The HTTP load: one streamed generation per stream over tokenpipe.http, the lean client
the openai engine uses (the request in one write, the events parsed as they arrive), for
every HTTP door: apis.py gives each API's request and the parser of its stream, this loop
is theirs in common. An httpx client per stream cost the bench about 40 ms of CPU each
(most of it building a TLS context) and wrote head and body apart; on a machine where the
bench shares cores with the servers it measures, that CPU is theirs."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ..http import HTTPError, Origin
from .apis import APIS, listed_model
from .metrics import base_url
from .results import StreamResult

if TYPE_CHECKING:
    from .streams import StartLine


async def http_stream(api: str, url: str, args: argparse.Namespace,
                      messages: list[dict[str, str]], line: StartLine) -> StreamResult:
    door = APIS[api]
    result = StreamResult()
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    body = door.body(args, messages)
    model = args.model
    origin = Origin(base_url(url), spares=False)
    arrived = False
    try:
        # Connect first, as the WebSocket client does before its clock starts.
        conn = await origin.request("GET", door.probe, b"", headers, connect_timeout_s=30)
        probe = await conn.read()
        conn.release()
        if model is None and door.model_required:
            model = listed_model(probe)
        if model is not None:
            body["model"] = model
        request = json.dumps(body).encode()
        arrived = True
        await line.wait()
        result.start()
        conn = await origin.request("POST", door.path, request,
                                    {"content-type": "application/json", **headers},
                                    connect_timeout_s=30)
        if conn.status != 200:
            result.error = f"http {conn.status}"
            conn.close()
            return result
        parser = door.parser(result)
        while (raw := await conn.receive()) is not None:
            parser.feed(raw)
        conn.release()
        result.stop()
    except HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        result.error = f"not {api}'s stream: {type(exc).__name__}: {exc}"
    finally:
        if not arrived:
            line.leave()
        origin.close()
    return result


async def sse_stream(url: str, args: argparse.Namespace,
                     messages: list[dict[str, str]], line: StartLine) -> StreamResult:
    """One streamed chat completion (`--api sse`)."""
    return await http_stream("sse", url, args, messages, line)
