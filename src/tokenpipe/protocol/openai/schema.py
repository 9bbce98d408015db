"""The OpenAPI description of the streamed answers: FastAPI documents JSON bodies by
itself, an event stream is written out here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its $defs inlined, to embed where no $ref resolves."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    result: dict[str, Any] = resolve(schema)
    return result


def sse_openapi(chunk: type[BaseModel], example: str) -> dict[str, Any]:
    """The `text/event-stream` content of an OpenAPI response, as FastAPI writes its own."""
    return {"itemSchema": {
        "type": "object", "required": ["data"],
        "properties": {"data": {"anyOf": [
            {"type": "string", "contentMediaType": "application/json",
             "contentSchema": inline_schema(chunk)},
            {"type": "string", "const": "[DONE]", "description": "the end of the stream"},
        ]}},
        "description": "Each `data:` line holds one chunk; the stream ends with `data: [DONE]`. "
                       "Comment lines (`: ping`, `: queued position=N`) keep idle streams "
                       "alive; SSE clients skip them."},
        "example": example}


def error_responses(model: type[BaseModel], texts: Mapping[int | str, str]
                    ) -> dict[int | str, dict[str, Any]]:
    """FastAPI's `responses=` for a door's errors: each status (or "4XX") with the door's
    error model and what it means there."""
    return {status: {"model": model, "description": text} for status, text in texts.items()}
