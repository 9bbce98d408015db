"""/v1/messages: Anthropic's Messages API (docs/protocol.md, "Anthropic Messages HTTP").
Thin: parse, start (or count), hand the session to SessionResponse. Every answer under
/v1/messages has Anthropic's error shape and statuses, unknown paths and wrong methods
too (the door's catch-all, doors.py); the API key (`x-api-key` or `Authorization:
Bearer`) is checked before any route (security.RequireKey).

The handlers read and validate the body themselves (FastAPI would answer 422 in its own
shape); the request models are documented in /docs through `openapi_extra`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from ...errors import TokenpipeError
from ...protocol.anthropic.errors import bad_body, validation_error
from ...protocol.anthropic.requests import CountTokensRequest, MessagesRequest
from ...protocol.anthropic.responses import ErrorResponse, MessageResponse, TokenCount
from ...protocol.openai.schema import error_responses, inline_schema
from ..requests import json_body, runtime_of
from .session_response import SessionResponse, error_response

router = APIRouter(prefix="/v1/messages", tags=["anthropic"])
_ERRORS = error_responses(ErrorResponse, {
    400: "invalid_request_error: a bad field (the message names it), or prompt plus "
         "max_tokens do not fit the context",
    401: "authentication_error: missing or wrong API key",
    404: "not_found_error: unknown model",
    413: "request_too_large: the body is over --max-body-bytes",
    500: "api_error: the engine failed before the first token",
    503: "api_error: the model is not loaded (yet), or the server is shutting down",
    529: "overloaded_error: the queue is full; retry after the `Retry-After` seconds",
})
_SSE = {"text/event-stream": {"example": (
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
    '"type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,'
    '"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":0,'
    '"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}}\n\n'
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    '"content_block":{"type":"text","text":""}}\n\n'
    'event: ping\ndata: {"type":"ping"}\n\n'
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"Hi"}}\n\n'
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
    '"stop_sequence":null},"usage":{"input_tokens":5,"output_tokens":1,'
    '"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}\n\n'
    'event: message_stop\ndata: {"type":"message_stop"}\n\n')}}


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": inline_schema(model)}}}}


@router.post("", response_model=MessageResponse, openapi_extra=_body_schema(MessagesRequest),
             responses={200: {"description": "The message, or with `stream: true` "
                              "Anthropic's server-sent events", "content": _SSE}, **_ERRORS})
async def create_message(request: Request) -> Response:
    """A message from the model, whole or streamed token by token."""
    try:
        body = MessagesRequest.model_validate(await json_body(request, bad_body))
        session = await runtime_of(request).models.start(body.to_request(), api="anthropic")
    except ClientDisconnect:
        return Response(status_code=400)  # nobody is left to read it
    except ValidationError as exc:
        return error_response(validation_error(exc.errors()))
    except TokenpipeError as exc:
        return error_response(exc)
    return SessionResponse(session, stream=body.stream,
                          ping_s=runtime_of(request).settings.sse_ping_interval_s)


@router.post("/count_tokens", response_model=TokenCount, responses=_ERRORS,
             openapi_extra=_body_schema(CountTokensRequest))
async def count_tokens(request: Request) -> Response:
    """The prompt's tokens, counted exactly as a generation of it counts them."""
    try:
        body = CountTokensRequest.model_validate(await json_body(request, bad_body))
        tokens = await runtime_of(request).models.count_tokens(body.to_request())
    except ClientDisconnect:
        return Response(status_code=400)
    except ValidationError as exc:
        return error_response(validation_error(exc.errors()))
    except TokenpipeError as exc:
        return error_response(exc)
    return JSONResponse({"input_tokens": tokens})
