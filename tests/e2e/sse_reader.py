"""Reading raw server-sent events as a browser's EventSource parses them (id and data
fields; comments skipped), for the resumable-stream tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Sse:
    id: str | None  # the event's own `id:` line, None when it has none
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


def events(lines: Iterator[str], count: int | None = None) -> list[Sse]:
    """The next `count` events (None: to the end of the stream)."""
    out: list[Sse] = []
    event_id: str | None = None
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                out.append(Sse(event_id, "\n".join(data)))
                if count is not None and len(out) == count:
                    return out
            event_id, data = None, []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id":
                event_id = value
            elif field == "data":
                data.append(value)
    return out


def text_of(chunks: list[Sse]) -> str:
    """The answer text of Chat Completions or Completions chunks (not [DONE], not errors)."""
    out = []
    for chunk in chunks:
        if chunk.data == "[DONE]":
            continue
        for choice in chunk.json.get("choices", ()):
            out.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    return "".join(out)


def ids(chunks: list[Sse]) -> list[int]:
    return [int(c.id) for c in chunks if c.id is not None]


def drop_after(client: httpx.Client, path: str, body: dict[str, Any], count: int,
               headers: dict[str, str] | None = None) -> tuple[str, list[Sse]]:
    """POSTs a streamed request, reads `count` events and drops the connection:
    (its X-Stream-Token, the events read)."""
    with client.stream("POST", path, json=body, headers=headers) as response:
        assert response.status_code == 200, response.read()
        token = response.headers["x-stream-token"]
        return token, events(response.iter_lines(), count)
